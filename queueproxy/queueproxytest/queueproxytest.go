// Package queueproxytest runs a function instance for tests of the layers
// above the queue-proxy, as httptest is to net/http: a real function
// process (internal/testfn) behind a real queue-proxy. It lives beside
// queueproxy rather than in internal so that no lower package imports a
// higher one. Test packages using it call testfn.RunIfChild in TestMain.
package queueproxytest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/queueproxy"
)

// Instance is a running instance.
type Instance struct {
	// Addr is the queue-proxy's serving address; AdminAddr its admin one.
	Addr, AdminAddr string
	// Function is the function process.
	Function *testfn.Process

	stop func()
}

// Stop drains and stops the queue-proxy: from then on its port refuses
// connections, as a stopped instance's does.
func (i *Instance) Stop() { i.stop() }

// Start runs an instance, its queue-proxy configured by set when given,
// waits until it is ready and stops it when the test ends.
func Start(t testing.TB, set ...func(*queueproxy.Config)) *Instance {
	t.Helper()
	fn := testfn.Start(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := queueproxy.Config{Namespace: "test", Function: "fn", UserPort: fn.Port,
		Timeout: 30 * time.Second, MaxBodyBytes: 10 << 20, DrainTimeout: time.Second}
	for _, f := range set {
		f(&cfg)
	}
	srv, err := queueproxy.New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv.QuietPeriod = 10 * time.Millisecond
	serving, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, serving, admin) }()
	var stopped error
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); stopped = <-done }) }
	t.Cleanup(func() {
		stop()
		if stopped != nil {
			t.Errorf("queue-proxy: %v", stopped)
		}
	})
	eventually.True(t, "the instance ready", srv.Ready)
	return &Instance{Addr: serving.Addr().String(), AdminAddr: admin.Addr().String(), Function: fn, stop: stop}
}
