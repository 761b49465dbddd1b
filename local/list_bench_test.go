package local

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/local/manifests"
	"sless.dev/sless/timeline"
)

// BenchmarkFunctionsList is what one read of GET /v1/functions costs with
// 1,000 functions: the console's functions page reads it every second.
func BenchmarkFunctionsList(b *testing.B) {
	dir := b.TempDir()
	var m strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&m, "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: f-%04d}\nspec: {runtime: python, source: ./fn}\n---\n", i)
	}
	if err := os.MkdirAll(filepath.Join(dir, "fn"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "functions.yaml"), []byte(m.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	fns, errs := manifests.Load(dir, manifests.LoadOptions{})
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	p, err := New(Options{Dir: dir, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	for _, fn := range fns {
		p.fns[fn.Key()] = &entry{fn: fn, created: time.Now(), running: true}
		p.timeline.Sample(time.Now(), fn.Namespace, fn.Name, timeline.Gauges{})
	}
	h := p.apiHandler()
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/functions", nil))
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
		b.SetBytes(int64(w.Body.Len()))
	}
}
