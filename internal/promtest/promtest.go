// Package promtest runs Debian's prometheus and promtool for tests and
// queries a Prometheus over its HTTP API. In CI the binaries must be
// there (.ci/run installs them); elsewhere a test without them is skipped,
// naming the package to install.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"
)

// Require returns the path of bin (prometheus or promtool), failing the
// test in CI and skipping it elsewhere when it is not on PATH.
func Require(t testing.TB, bin string) string {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err == nil {
		return path
	}
	needs.Missing(t, "%s, not on PATH: install the Debian package prometheus (apt-get install prometheus)", bin)
	return ""
}

// Series are the labels of each series a query returned.
type Series []map[string]string

// Query evaluates expr at the current time on the Prometheus at base
// (http://host:port) and returns the series of its instant vector.
func Query(ctx context.Context, base, expr string) (Series, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status, Error string
		Data          struct {
			ResultType string
			Result     []struct{ Metric map[string]string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %s: %w", expr, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: a %s, want an instant vector", expr, body.Data.ResultType)
	}
	out := make(Series, len(body.Data.Result))
	for i, r := range body.Data.Result {
		out[i] = r.Metric
	}
	return out, nil
}
