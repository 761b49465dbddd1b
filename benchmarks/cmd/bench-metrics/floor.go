package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protodelim"
)

// floorEnv makes the benchmark's process the floor: it serves, on the
// listener it is given as fd 3, the sless_ families saved in the file
// the variable names, as plain vectors.
const floorEnv = "BENCH_METRICS_FLOOR"

// serveFloor serves the floor's page and never returns.
func serveFloor(file string) {
	reg := prometheus.NewRegistry()
	// The same collectors sless dev registers beside its own series.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fams, err := readFamilies(file)
	if err == nil {
		err = mirror(reg, fams)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.FileListener(os.NewFile(3, "floor listener"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintln(os.Stderr, "floor:", srv.Serve(ln))
	os.Exit(1)
}

// floorProcess is the floor: this benchmark's binary serving the
// families of sless dev's page in a process of its own.
type floorProcess struct {
	cmd *exec.Cmd
	url string
}

// startFloor saves the families of the page at from into dir and starts
// the floor on them.
func startFloor(ctx context.Context, from, dir string) (*floorProcess, error) {
	famFile := filepath.Join(dir, "families.pb")
	if err := saveFamilies(ctx, from, famFile); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The floor's listener is made here and handed over, since sless dev
	// takes free ports for its instances all along.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	lnFile, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, err
	}
	defer lnFile.Close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), floorEnv+"="+famFile)
	cmd.ExtraFiles = []*os.File{lnFile} // fd 3
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &floorProcess{cmd: cmd, url: "http://" + ln.Addr().String() + "/metrics"}, nil
}

func (f *floorProcess) stop() { _ = f.cmd.Process.Kill(); _ = f.cmd.Wait() }

// composition waits for the floor to serve its page, for at most a
// minute, and returns what the page is made of.
func (f *floorProcess) composition(ctx context.Context, names []string) (composition, error) {
	page, err := waitPage(ctx, f.url, time.Minute)
	if err != nil {
		return composition{}, fmt.Errorf("floor: %w", err)
	}
	return analyse(page, names), nil
}

// readFamilies reads delimited MetricFamily messages.
func readFamilies(file string) ([]*dto.MetricFamily, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var out []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		err := protodelim.UnmarshalFrom(r, mf)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, mf)
	}
}

// maxObservations bounds what a histogram series is given to reproduce
// its bucket counts; beyond, it gets one observation.
const maxObservations = 1000

// mirror registers the sless_ families of fams in reg as counter, gauge
// and histogram vectors with the same names, help, label names, buckets
// and label values, and the same values (a histogram's bucket counts).
func mirror(reg *prometheus.Registry, fams []*dto.MetricFamily) error {
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "sless_") || len(f.Metric) == 0 {
			continue
		}
		// The union of the label names; a series without one gets "".
		var names []string
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if !slices.Contains(names, l.GetName()) {
					names = append(names, l.GetName())
				}
			}
		}
		slices.Sort(names)
		values := func(m *dto.Metric) []string {
			out := make([]string, len(names))
			for _, l := range m.Label {
				out[slices.Index(names, l.GetName())] = l.GetValue()
			}
			return out
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.GetName(), Help: f.GetHelp()}, names)
			for _, m := range f.Metric {
				v.WithLabelValues(values(m)...).Add(m.GetCounter().GetValue())
			}
			if err := reg.Register(v); err != nil {
				return fmt.Errorf("%s: %w", f.GetName(), err)
			}
		case dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
			v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: f.GetName(), Help: f.GetHelp()}, names)
			for _, m := range f.Metric {
				val := m.GetGauge().GetValue()
				if m.Untyped != nil {
					val = m.GetUntyped().GetValue()
				}
				v.WithLabelValues(values(m)...).Set(val)
			}
			if err := reg.Register(v); err != nil {
				return fmt.Errorf("%s: %w", f.GetName(), err)
			}
		case dto.MetricType_HISTOGRAM:
			var buckets []float64
			for _, b := range f.Metric[0].GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) {
					buckets = append(buckets, b.GetUpperBound())
				}
			}
			v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: f.GetName(), Help: f.GetHelp(), Buckets: buckets}, names)
			for _, m := range f.Metric {
				observe(v.WithLabelValues(values(m)...), m.GetHistogram())
			}
			if err := reg.Register(v); err != nil {
				return fmt.Errorf("%s: %w", f.GetName(), err)
			}
		default:
			return fmt.Errorf("%s: type %s not mirrored", f.GetName(), f.GetType())
		}
	}
	return nil
}

// observe gives o h's bucket counts, observing each bucket's upper bound
// as often as the bucket counts more than the one before (the values
// above the last bound at twice it), when they are few.
func observe(o prometheus.Observer, h *dto.Histogram) {
	if h.GetSampleCount() == 0 {
		return
	}
	if h.GetSampleCount() > maxObservations {
		o.Observe(h.GetSampleSum() / float64(h.GetSampleCount()))
		return
	}
	var prev uint64
	last := 0.0
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		for range b.GetCumulativeCount() - prev {
			o.Observe(b.GetUpperBound())
		}
		prev, last = b.GetCumulativeCount(), b.GetUpperBound()
	}
	for range h.GetSampleCount() - prev {
		o.Observe(2 * last)
	}
}
