package runtimes

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// Expand replaces each $(NAME) in args by NAME's value in env (NAME=value
// entries, the last one of a name counting), as Kubernetes expands a
// container's command with its environment, so that a command runs the
// same under sless dev: $$ is a $, and a name env does not hold stays
// as written.
func Expand(args, env []string) []string {
	var out []string
	for i, arg := range args {
		if !strings.Contains(arg, "$") {
			continue
		}
		if out == nil {
			out = slices.Clone(args)
		}
		out[i] = expand(arg, env)
	}
	if out == nil {
		return args
	}
	return out
}

func expand(s string, env []string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			ref := s[i : i+3+end]
			if v, ok := lookupEnv(env, s[i+2:i+2+end]); ok {
				ref = v
			}
			b.WriteString(ref)
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// lookupEnv is name's value in env, the last entry counting.
func lookupEnv(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}
