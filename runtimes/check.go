package runtimes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// envLoadOnly makes a runtime script load the handler and exit, 0 when
// it loaded: what the script checks at its start, without serving.
const envLoadOnly = "SLESS_LOAD_ONLY"

// Bounds of a load check: a module that takes longer to import (or
// waits on something at import) is reported, not waited for; what it
// prints is kept to its end.
const (
	loadCheckTimeout = time.Minute
	loadCheckOutput  = 16 << 10
)

// checkLoads loads a script runtime's handler as its process would start
// (the runtime script, the installed dependencies, the Function's
// variables), on this machine, without serving: a module that does not
// import, or has no such function, fails the build with the runtime's own
// message rather than crash every instance on the cluster. Importing runs
// the module's top level, as every start does; the handler is not called.
func checkLoads(ctx context.Context, p prepared) error {
	proc := p.process()
	ctx, cancel := context.WithTimeout(ctx, loadCheckTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, proc.Path, proc.Args...)
	cmd.Dir = proc.Dir
	cmd.Env = append(append(append(os.Environ(), proc.Env...), p.src.Env...), envLoadOnly+"=1")
	out := &tailBuffer{max: loadCheckOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s handler %s of %s/%s: loading it took over %s", p.src.Runtime, p.handler, p.src.Namespace, p.src.Name, loadCheckTimeout)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("%s handler %s of %s/%s does not load (%v):\n%s", p.src.Runtime, p.handler, p.src.Namespace, p.src.Name, err,
		bytes.TrimSpace(out.buf))
}

// tailBuffer keeps the last max bytes written to it: a failure's message
// comes last.
type tailBuffer struct {
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}
