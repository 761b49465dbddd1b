package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	promconfig "sless.dev/sless/config/prometheus"
)

// prometheusPackage is what to install for --prometheus, named in its
// error.
const prometheusPackage = "Debian's and Ubuntu's package prometheus (apt-get install prometheus)"

// findPrometheus returns the prometheus binary on PATH, or an error that
// says what to install.
func findPrometheus() (string, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return "", fmt.Errorf("--prometheus: no prometheus on PATH: install %s", prometheusPackage)
	}
	return bin, nil
}

// devPrometheus is a Prometheus server `sless dev --prometheus` runs
// beside the platform, with the rules and alerts of config/prometheus.
type devPrometheus struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once it exited, with err
	err    error
	url    string
	log    string
}

// startPrometheus starts Prometheus on listen, scraping the platform's
// admin address, with its files and data under dir (kept between runs, so
// earlier runs' graphs stay; one directory per listen port). Its output
// goes to a log file beside them.
func startPrometheus(listen, admin, dir string) (*devPrometheus, error) {
	bin, err := findPrometheus()
	if err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--prometheus-listen %s: %w", listen, err)
	}
	dir = filepath.Join(dir, "prometheus", port)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("--prometheus: %w", err)
	}
	config, err := promconfig.WriteDev(dir, scrapeAddr(admin))
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("--prometheus: %w", err)
	}
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--storage.tsdb.retention.time=7d")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("--prometheus: %w", err)
	}
	p := &devPrometheus{cmd: cmd, exited: make(chan struct{}), url: "http://" + scrapeAddr(listen), log: logPath}
	go func() { p.err = cmd.Wait(); logFile.Close(); close(p.exited) }()
	return p, nil
}

// watch reports on w an exit of Prometheus before ctx ends (a port in
// use, a bad data directory), naming its log.
func (p *devPrometheus) watch(ctx context.Context, w io.Writer) {
	select {
	case <-p.exited:
		fmt.Fprintf(w, "prometheus exited: %v (see %s)\n", p.err, p.log)
	case <-ctx.Done():
	}
}

// stop ends Prometheus, letting it flush its data first.
func (p *devPrometheus) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		var exit *exec.ExitError
		if errors.As(p.err, &exit) && exit.Exited() {
			return fmt.Errorf("prometheus: %w (see %s)", p.err, p.log)
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("prometheus did not stop within 10s: killed")
	}
}

// scrapeAddr is an address to dial for one that may be a wildcard
// (":9090", "0.0.0.0:9090"): the wildcard's loopback.
func scrapeAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
