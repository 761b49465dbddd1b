package activator

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/invocation"
	"sless.dev/sless/invocation/postgres"
)

// The invocation routes answer from PostgreSQL as they do from the ring
// (TestServer): the same checks pass on both.
func TestInvocationRoutesOnPostgres(t *testing.T) {
	url, _ := pgtest.DB(t)
	reg := prometheus.NewRegistry()
	store, err := postgres.Open(context.Background(), url, reg, postgres.Options{FlushInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Start())

	a, err := New(Config{}, &countingPoker{}, store, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	a.SetFunction(Function{Namespace: "ns", Name: "hello", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "hello", []string{startInstance(t)})
	base := serveActivator(t, a)
	srv := &Server{Activator: a, Registry: reg, Records: store, DrainTimeout: time.Second, Log: quiet}
	serving, _ := net.Listen("tcp", "127.0.0.1:0")
	admin, _ := net.Listen("tcp", "127.0.0.1:0")
	srvCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Run(srvCtx, serving, admin) }()
	t.Cleanup(func() { stop(); <-served })
	for range 3 {
		if code, body := get(t, base+"/fn/ns/hello/echo"); code != 200 {
			t.Fatalf("invocation: %d %s", code, body)
		}
	}
	url2 := "http://" + admin.Addr().String() + "/v1/namespaces/ns/functions/hello/invocations"
	eventually.True(t, "3 records", func() bool {
		page, err := store.List(context.Background(), invocation.Query{Namespace: "ns", Function: "hello"})
		return err == nil && len(page.Invocations) == 3
	})
	checkInvocationRoutes(t, url2, "")
}
