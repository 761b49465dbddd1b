// Package hops is what the request-path benchmarks put in the middle of a
// path, as processes of their own: a byte relay (the floor: what one more
// process costs, before any HTTP) and an activator alone. A benchmark
// starts itself again with RelayEnv or ActivatorEnv, and calls RunIfChild
// first in main. It also has what the benchmarks share to measure: free
// ports, CPU time, a runtime process started alone, percentiles.
package hops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/activator"
	"sless.dev/sless/invocation"
)

const (
	relayEnv     = "BENCH_RELAY"
	activatorEnv = "BENCH_ACTIVATOR"
	// Domain is the activator's host routing domain.
	Domain = "sless.bench"
)

// RelayEnv makes a benchmark process a relay from listen to target.
func RelayEnv(listen, target int) string { return fmt.Sprintf("%s=%d,%d", relayEnv, listen, target) }

// ActivatorEnv makes a benchmark process an activator serving on serving
// and admin, with one function, bench/bench, whose one instance is target;
// by host, it is bench.bench.<Domain>.
func ActivatorEnv(serving, admin, target int) string {
	return fmt.Sprintf("%s=%d,%d,%d", activatorEnv, serving, admin, target)
}

// RunIfChild serves as the hop its environment names, and never returns;
// without one it returns at once.
func RunIfChild() {
	if ports := os.Getenv(relayEnv); ports != "" {
		serveRelay(strings.Split(ports, ","))
	}
	if ports := os.Getenv(activatorEnv); ports != "" {
		serveActivator(strings.Split(ports, ","))
	}
}

// serveRelay relays "listen,target": two goroutines per connection copy
// each way, knowing nothing of HTTP.
func serveRelay(p []string) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+p[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go relay(c, "127.0.0.1:"+p[1])
	}
}

func relay(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
}

// serveActivator serves "serving,admin,target": one function bench/bench
// whose one instance is target.
func serveActivator(p []string) {
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	ring := invocation.NewRing(10_000)
	a, err := activator.New(activator.Config{Domain: Domain}, NopPoker{}, ring, reg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	a.SetFunction(activator.RouteSpec{Namespace: "bench", Name: "bench", HTTP: true, Timeout: time.Minute})
	a.SetEndpoints("bench", "bench", []string{"127.0.0.1:" + p[2]})
	serving, err1 := net.Listen("tcp", "127.0.0.1:"+p[0])
	admin, err2 := net.Listen("tcp", "127.0.0.1:"+p[1])
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &activator.Server{Activator: a, DrainTimeout: time.Second, Log: log,
		Admin: activator.AdminServer{Activator: a, Registry: reg, Records: ring, Log: log}}
	fmt.Fprintln(os.Stderr, srv.Run(context.Background(), serving, admin))
	os.Exit(1)
}

// NopPoker is an activator's Poker where no autoscaler listens.
type NopPoker struct{}

func (NopPoker) Poke(string, string) {}

// FreePorts returns n loopback ports free when it returns.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// CPUTime is the user+system CPU time a process has used, from /proc (its
// own, not its children's).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}
