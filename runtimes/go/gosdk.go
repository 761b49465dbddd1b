// Package gosdk carries the Go functions' SDK, package sless, into the
// sless binary: sless writes it out beside every Go function it builds, so
// that a function builds with no checkout of this repository and no
// published module. It is here, at the module's root, because go:embed
// cannot reach into another module; a function never imports it.
package gosdk

import "embed"

// Files are the module's go.mod and the sless package's files (its tests
// too: whoever writes the module out leaves them out).
//
//go:embed go.mod sless/*.go
var Files embed.FS
