// The Go functions' SDK: a module of its own, standard library only, so
// that a function requires nothing of sless's own dependencies. sless
// embeds it and builds every Go function against the embedded copy.
module sless.dev/sless/runtimes/go

go 1.24
