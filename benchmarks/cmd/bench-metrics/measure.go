package main

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"sless.dev/sless/benchmarks/hops"
)

// target is a page to scrape and the process serving it.
type target struct {
	name, url string
	pid       int
}

// batch is one measurement: scrapes back to back after an idle interval.
type batch struct {
	attr               attribution // perf's, when recorded
	scrapes            int
	wall               time.Duration // the batch's
	cpu, idleCPU       time.Duration // during the batch; during the idle interval
	idle               time.Duration // the idle interval's length
	bytes              int           // of the last scrape's body, as sent
	encoding, contType string
}

// netCPU is the batch's CPU per scrape with the idle rate's share of the
// batch subtracted; rawCPU without.
func (b batch) netCPU() time.Duration {
	background := time.Duration(float64(b.idleCPU) * float64(b.wall) / float64(b.idle))
	return (b.cpu - background) / time.Duration(b.scrapes)
}
func (b batch) rawCPU() time.Duration { return b.cpu / time.Duration(b.scrapes) }

// ownCPU is the CPU per scrape in the scrapes' own stacks: the batch's
// CPU times the share of perf's samples in them.
func (b batch) ownCPU() time.Duration {
	if b.attr.samples == 0 {
		return 0
	}
	return time.Duration(float64(b.cpu) * float64(b.attr.scrape) / float64(b.attr.samples) / float64(b.scrapes))
}
func (b batch) perScrape() time.Duration { return b.wall / time.Duration(b.scrapes) }

// perfKey names the batch perf recorded.
func perfKey(name string) string { return name + "/gzip/perf" }

func batchKey(name string, gz bool) string {
	if gz {
		return name + "/gzip"
	}
	return name + "/plain"
}

// measure takes the process's CPU over an idle interval, then over n
// scrapes back to back on one connection (open since the page was first
// read), or fewer when they take longer than maxBatch. With a perfFile,
// perf records the scrapes.
func measure(ctx context.Context, t target, gz bool, n int, maxBatch, idle time.Duration, perfFile string) (batch, error) {
	var b batch
	cpu0, err := hops.CPUTime(t.pid)
	if err != nil {
		return b, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return b, ctx.Err()
	case <-time.After(idle):
	}
	cpu1, err := hops.CPUTime(t.pid)
	if err != nil {
		return b, err
	}
	b.idle, b.idleCPU = time.Since(start), cpu1-cpu0
	var rec *recording
	if perfFile != "" {
		if rec, err = startPerf(ctx, t.pid, perfFile); err != nil {
			return b, err
		}
		defer func() {
			if rec != nil {
				_ = rec.stop()
			}
		}()
		if cpu1, err = hops.CPUTime(t.pid); err != nil {
			return b, err
		}
	}
	start = time.Now()
	for ; b.scrapes < n && (b.scrapes == 0 || time.Since(start) < maxBatch); b.scrapes++ {
		size, enc, ct, err := scrape(ctx, t.url, gz)
		if err != nil {
			return b, err
		}
		b.bytes, b.encoding, b.contType = size, enc, ct
	}
	b.wall = time.Since(start)
	cpu2, err := hops.CPUTime(t.pid)
	if err != nil {
		return b, err
	}
	b.cpu = cpu2 - cpu1
	if rec != nil {
		err := rec.stop()
		rec = nil
		if err != nil {
			return b, err
		}
		if b.attr, err = attribute(ctx, perfFile); err != nil {
			return b, err
		}
	}
	return b, nil
}

// scrape reads the page as Prometheus does and returns its size as sent,
// its Content-Encoding and Content-Type; a gzipped body is decompressed
// and checked.
func scrape(ctx context.Context, url string, gz bool) (int, string, string, error) {
	body, header, err := getWithHeader(ctx, url, acceptText, gz)
	if err != nil {
		return 0, "", "", err
	}
	enc := header.Get("Content-Encoding")
	if enc == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return 0, "", "", err
		}
		if _, err := io.Copy(io.Discard, zr); err != nil {
			return 0, "", "", fmt.Errorf("gzipped page: %w", err)
		}
	}
	return len(body), cmp.Or(enc, "identity"), header.Get("Content-Type"), nil
}

// rss is a process's resident memory, from /proc.
func rss(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
