package runtimes

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// errServerImage is PrepareImage's answer for a Function that brings its
// own server: sless knows how to build its runtimes' functions, not a
// server in any language.
var errServerImage = errors.New("a Function without a runtime brings its own server: it runs the image it names (spec.image), built with the tools of its language; sless builds the images of its runtimes' functions")

// prepareServer makes ready a Function that brings its own server: there
// is nothing to build or install, and its command runs in its source
// directory. The program is looked up now, so that a typing error is said
// once, as a build error would be, not at each instance's start.
func prepareServer(src Source) (prepared, error) {
	if len(src.Command) == 0 {
		return prepared{}, fmt.Errorf("function %s/%s: no runtime and no command: a Function without a runtime needs the command that starts its own server", src.Namespace, src.Name)
	}
	program, err := lookPath(src.Dir, src.Command[0])
	if err != nil {
		return prepared{}, fmt.Errorf("function %s/%s: command %q: %w", src.Namespace, src.Name, src.Command[0], err)
	}
	return prepared{src: src, command: program, args: src.Command[1:]}, nil
}

// lookPath finds program as a shell would from dir: a name with a slash is
// a path from dir, any other name is looked up in $PATH.
func lookPath(dir, program string) (string, error) {
	if !strings.Contains(program, "/") {
		return exec.LookPath(program)
	}
	if !filepath.IsAbs(program) {
		program = filepath.Join(dir, program)
	}
	info, err := os.Stat(program)
	switch {
	case err != nil:
		return "", err
	case info.IsDir():
		return "", fmt.Errorf("%s is a directory", program)
	case info.Mode()&0o111 == 0:
		return "", fmt.Errorf("%s is not executable", program)
	}
	return program, nil
}
