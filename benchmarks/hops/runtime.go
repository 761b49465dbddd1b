package hops

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/runtimes"
)

// PrepareHello readies the hello sample of rt, in samples, to run with no
// platform (StartRuntime), with its default handler; the build is kept in
// cacheDir.
func PrepareHello(ctx context.Context, rt v1alpha1.Runtime, samples, cacheDir string) (runtimes.Process, error) {
	return runtimes.Prepare(ctx, runtimes.Source{Namespace: "default", Name: "direct-" + string(rt),
		Runtime: rt, Dir: filepath.Join(samples, "hello-"+string(rt)),
		Handler: (&v1alpha1.FunctionSpec{Runtime: rt}).EffectiveHandler()},
		runtimes.Options{CacheDir: cacheDir})
}

// StartRuntime starts a prepared runtime process alone, with no platform,
// on a free loopback port, and returns it with its address; it may not
// answer yet (see WaitOK).
func StartRuntime(proc runtimes.Process) (*exec.Cmd, string, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(proc.Path, proc.Args...)
	cmd.Dir = proc.Dir
	cmd.Env = append(append(os.Environ(), proc.Env...), "PORT="+strconv.Itoa(ports[0]))
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	return cmd, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}

// WaitOK polls url, with header, every poll until it answers 200, for at
// most within.
func WaitOK(ctx context.Context, url string, header http.Header, poll, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header = header
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %v", url, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// Pct is the p-th percentile of d, the nearest rank.
func Pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// Ms formats d in milliseconds, to a tenth.
func Ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64)
}
