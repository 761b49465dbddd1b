package prometheus_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	promconfig "sless.dev/sless/config/prometheus"
	"sless.dev/sless/internal/promtest"
	"sless.dev/sless/internal/wire"
)

// promtool runs promtool with args in dir and fails the test with its
// output when it fails.
func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtest.Require(t, "promtool"), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The files are valid, and every alert fires on its trouble and stays
// quiet on a healthy series (alerts_test.yml).
func TestPromtool(t *testing.T) {
	for _, args := range [][]string{
		{"check", "config", "prometheus.yml"},
		{"check", "rules", "rules.yml", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) { promtool(t, ".", args...) })
	}
}

// Every alert has a unit test and a runbook paragraph.
func TestAlertsTestedAndDocumented(t *testing.T) {
	alerts, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(alerts), "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "- alert: ")
		if !ok {
			continue
		}
		n++
		if !strings.Contains(string(tests), "alertname: "+name+"\n") {
			t.Errorf("alert %s has no test in alerts_test.yml", name)
		}
		if !strings.Contains(string(runbook), "### "+name+"\n") {
			t.Errorf("alert %s has no runbook section (### %s) in docs/observability.md", name, name)
		}
	}
	if n < 10 {
		t.Errorf("%d alerts found in alerts.yml, want the 10 it has at least", n)
	}
}

// What sless dev --prometheus writes is a valid configuration scraping the
// admin address it was given.
func TestWriteDev(t *testing.T) {
	dir := t.TempDir()
	path, err := promconfig.WriteDev(dir, "127.0.0.1:19999")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"127.0.0.1:19999"`) || strings.Contains(string(b), "9090") {
		t.Errorf("config does not scrape 127.0.0.1:19999 alone:\n%s", b)
	}
	promtool(t, dir, "check", "config", filepath.Base(path))
}

// The PodMonitors select what the controller and config/ make: function
// pods by their label, sless's own by part-of, each on its admin port.
func TestPodMonitors(t *testing.T) {
	f, err := os.Open("podmonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	monitors := map[string]*unstructured.Unstructured{}
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if u.GetKind() != "PodMonitor" || u.GetAPIVersion() != "monitoring.coreos.com/v1" {
			t.Errorf("%s %s: want monitoring.coreos.com/v1 PodMonitor", u.GetAPIVersion(), u.GetKind())
		}
		monitors[u.GetName()] = &u
	}
	fn, sys := monitors["sless-functions"], monitors["sless-system"]
	if fn == nil || sys == nil {
		t.Fatalf("PodMonitors %v, want sless-functions and sless-system", monitors)
	}
	exprs, _, _ := unstructured.NestedSlice(fn.Object, "spec", "selector", "matchExpressions")
	if len(exprs) != 1 || exprs[0].(map[string]any)["key"] != wire.FunctionLabel {
		t.Errorf("sless-functions selects %v, want the label %s", exprs, wire.FunctionLabel)
	}
	for _, m := range []*unstructured.Unstructured{fn, sys} {
		eps, _, _ := unstructured.NestedSlice(m.Object, "spec", "podMetricsEndpoints")
		if len(eps) != 1 {
			t.Fatalf("%s: endpoints %v, want one", m.GetName(), eps)
		}
		ep := eps[0].(map[string]any)
		if ep["port"] != wire.AdminPortName || ep["honorLabels"] != true {
			t.Errorf("%s: endpoint %v, want port %s with honorLabels", m.GetName(), ep, wire.AdminPortName)
		}
	}
}
