package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

var client = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}}

// get fetches url and returns its body, which must come with a 200.
func get(ctx context.Context, url, accept string, gz bool) ([]byte, error) {
	body, _, err := getWithHeader(ctx, url, accept, gz)
	return body, err
}

// getWithHeader is get that also returns the answer's header.
func getWithHeader(ctx context.Context, url, accept string, gz bool) ([]byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s: %d %.200s", url, resp.StatusCode, body)
	}
	return body, resp.Header, nil
}

// settle reads the page every 2 s until its series stop changing in
// number (the autoscaler's gauges come with its next decision), for at
// most within, and returns the last one.
func settle(ctx context.Context, url string, within time.Duration) ([]byte, error) {
	deadline := time.Now().Add(within)
	last := -1
	for {
		page, err := get(ctx, url, acceptText, false)
		if err != nil {
			return nil, err
		}
		n := bytes.Count(page, []byte("\nsless_"))
		if n == last || time.Now().After(deadline) {
			return page, nil
		}
		last = n
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// waitPage polls url until it serves the page, for at most within.
func waitPage(ctx context.Context, url string, within time.Duration) ([]byte, error) {
	deadline := time.Now().Add(within)
	for {
		page, err := get(ctx, url, acceptText, false)
		if err == nil {
			return page, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkBusy checks that fn's series say what the benchmark meant: one
// cold start, one ready instance, its requests answered 200.
func checkBusy(page []byte, fn string) error {
	want := []string{
		`sless_cold_starts_total{function="` + fn + `",namespace="default"} 1`,
		`sless_activator_requests_total{code="200",function="` + fn + `",namespace="default"} 1`,
		`sless_autoscaler_ready_replicas{function="` + fn + `",namespace="default"} 1`,
	}
	for _, w := range want {
		if !bytes.Contains(page, []byte("\n"+w+"\n")) {
			return fmt.Errorf("the page has no %s", w)
		}
	}
	return nil
}

// composition is what a page is made of, in series (sample lines, as
// Prometheus counts them: a histogram's buckets, sum and count each).
type composition struct {
	total, sless, slessNoFunction, other int
	bytes                                int
	// perFunction counts each function's sless_ series; families, the
	// first function's by family.
	perFunction   map[string]int
	families      map[string]int
	familyTypes   map[string]string
	otherFamilies map[string]int
}

func analyse(page []byte, names []string) composition {
	c := composition{bytes: len(page), perFunction: map[string]int{}, families: map[string]int{},
		familyTypes: map[string]string{}, otherFamilies: map[string]int{}}
	first := `function="` + names[0] + `"`
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			if len(f) == 4 {
				c.familyTypes[f[2]] = f[3]
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		c.total++
		name := line[:strings.IndexAny(line, "{ ")]
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && c.familyTypes[base] == "histogram" {
				family = base
			}
		}
		if !strings.HasPrefix(name, "sless_") {
			c.other++
			c.otherFamilies[strings.SplitN(family, "_", 2)[0]]++
			continue
		}
		c.sless++
		labels := ""
		if i, j := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}'); i >= 0 && j > i {
			labels = line[i+1 : j]
		}
		fn := labelValue(labels, "function")
		if fn == "" {
			c.slessNoFunction++
			continue
		}
		c.perFunction[fn]++
		if strings.Contains(labels, first) {
			c.families[family]++
		}
	}
	return c
}

// labelValue finds name's value in a sample line's labels.
func labelValue(labels, name string) string {
	for _, prefix := range []string{name + `="`, `,` + name + `="`} {
		if i := strings.Index(labels, prefix); i >= 0 && (i == 0 || prefix[0] == ',') {
			rest := labels[i+len(prefix):]
			if j := strings.IndexByte(rest, '"'); j >= 0 {
				return rest[:j]
			}
		}
	}
	return ""
}

// saveFamilies writes the page's families, in the delimited protobuf
// format, to file: what the floor mirrors.
func saveFamilies(ctx context.Context, url, file string) error {
	body, err := get(ctx, url, acceptProto, false)
	if err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}

// readBusyPage reads sless dev's page once its series settle, checks that
// the first function's say it is busy, and returns what the page is made
// of.
func readBusyPage(ctx context.Context, url string, names []string) (composition, error) {
	page, err := settle(ctx, url, 30*time.Second)
	if err != nil {
		return composition{}, err
	}
	if err := checkBusy(page, names[0]); err != nil {
		return composition{}, err
	}
	return analyse(page, names), nil
}
