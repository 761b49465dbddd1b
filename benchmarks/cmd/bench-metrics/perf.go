package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// A busy sless dev shares two cores with its instances and its own
// background work (probes, the autoscaler's reads, the manifests'
// polling), and takes what CPU it can get: while it scrapes, its
// background work waits, so its CPU over a batch minus its idle rate
// does not isolate the scrape. perf does: the samples whose call stack
// is a scrape's (the /metrics handler, the gatherers, the collectors
// they run, the encoding) are the scrape's CPU, whatever else runs.

// perfRate is the sampling frequency, in Hz.
const perfRate = 499

// recording is perf recording one process.
type recording struct {
	cmd  *exec.Cmd
	file string
}

// startPerf records pid's on-CPU call stacks into file.
func startPerf(ctx context.Context, pid int, file string) (*recording, error) {
	cmd := exec.CommandContext(ctx, "perf", "record", "-q", "-F", strconv.Itoa(perfRate), "-g", "-p", strconv.Itoa(pid), "-o", file)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	time.Sleep(time.Second) // it attaches to every thread
	return &recording{cmd: cmd, file: file}, nil
}

// stop ends the recording, and kills perf when it takes more than a
// minute to write its file.
func (r *recording) stop() error {
	_ = r.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		if _, ok := errors.AsType[*exec.ExitError](err); ok {
			err = nil // perf ends on the interrupt it was sent
		}
		return err
	case <-time.After(time.Minute):
		_ = r.cmd.Process.Kill()
		<-done
		return errors.New("perf did not stop within a minute")
	}
}

// part is where a scrape's CPU goes: the first part whose frame is on a
// sample's stack takes the sample.
type part struct{ name, frame string }

var parts = []part{
	{"process collectors (/proc reads)", "prometheus.(*processCollector)"},
	{"Go collectors", "prometheus.(*goCollector)"},
	{"gzip", "compress/flate."},
	{"text encoding", "expfmt."},
	{"registries' Gather (collect, check, sort)", "prometheus.(*Registry).Gather"},
	{"sless dev's gatherer (merge, relabel, sort)", "sless/local.gatherer.Gather"},
	{"rest of the handler", "promhttp."},
}

// attribution is what perf saw of a process over a batch.
type attribution struct {
	samples, scrape int
	resolved        int // samples with a Go function named on their stack
	gcMark          int // samples in the background GC workers
	gcAssist        int // scrape samples assisting the GC
	parts           map[string]int
}

// attribute reads a recording and counts the samples in a scrape's
// stacks.
func attribute(ctx context.Context, file string) (attribution, error) {
	a := attribution{parts: map[string]int{}}
	out, err := exec.CommandContext(ctx, "perf", "script", "-i", file, "-F", "time,ip,sym").Output()
	if err != nil {
		return a, fmt.Errorf("perf script: %w", err)
	}
	var stack []string
	flush := func() {
		if len(stack) == 0 {
			return
		}
		a.samples++
		joined := strings.Join(stack, "\n")
		if strings.Contains(joined, "runtime.") {
			a.resolved++
		}
		if strings.Contains(joined, "runtime.gcBgMarkWorker") {
			a.gcMark++
		}
		for _, p := range parts {
			if strings.Contains(joined, p.frame) {
				a.scrape++
				a.parts[p.name]++
				if strings.Contains(joined, "runtime.gcAssistAlloc") {
					a.gcAssist++
				}
				break
			}
		}
		stack = stack[:0]
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] != ' ' && line[0] != '\t': // a sample's header
			flush()
			stack = append(stack, "") // a sample with no frames still counts
		default:
			stack = append(stack, strings.TrimSpace(line))
		}
	}
	flush()
	if a.samples > 0 && a.resolved == 0 {
		return a, errors.New("perf named no Go function of the process: is its binary stripped? (go run strips the benchmark's own, which serves the floor: go build it)")
	}
	return a, sc.Err()
}

// perfAvailable reports whether perf can record here.
func perfAvailable() bool {
	_, err := exec.LookPath("perf")
	return err == nil
}
