// Package prometheus holds the Prometheus files of sless, embedded so that
// `sless dev --prometheus` starts Prometheus with the very files the tests
// check: the scrape configuration of the local platform, the recording
// rules and the alerts.
package prometheus

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

//go:embed prometheus.yml rules.yml alerts.yml
var files embed.FS

// devTarget is the admin address prometheus.yml scrapes, the default of
// `sless dev --admin`.
const devTarget = "127.0.0.1:9090"

// WriteDev writes prometheus.yml, scraping the platform's admin address,
// and the rule files it names into dir, and returns the configuration's
// path.
func WriteDev(dir, admin string) (string, error) {
	for _, name := range []string{"prometheus.yml", "rules.yml", "alerts.yml"} {
		b, err := files.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("prometheus files: %w", err)
		}
		if name == "prometheus.yml" {
			target := `"` + devTarget + `"`
			if !strings.Contains(string(b), target) {
				return "", fmt.Errorf("prometheus.yml: no target %s to replace", target)
			}
			b = []byte(strings.Replace(string(b), target, `"`+admin+`"`, 1))
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return "", fmt.Errorf("prometheus files: %w", err)
		}
	}
	return filepath.Join(dir, "prometheus.yml"), nil
}
