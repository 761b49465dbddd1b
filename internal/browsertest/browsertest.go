// Package browsertest runs a real headless Chromium for tests, driven with
// chromedp: Debian's chromium, which .ci/run installs.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"

	"github.com/chromedp/chromedp"
)

// Binary finds Chromium: $SLESS_CHROMIUM, else chromium on PATH.
func Binary() (string, error) {
	if p := os.Getenv("SLESS_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// New starts a headless Chromium for t and returns a context of one tab,
// bounded by timeout; both end with the test. Without Chromium the test
// is skipped, or fails in CI.
func New(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		needs.Missing(t, "chromium: apt-get install chromium, or set SLESS_CHROMIUM")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), Options(bin, t.TempDir())...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	return ctx
}

// Options start Chromium at bin headless, with a profile in dir. The
// machine's network is closed: the flags keep Chromium from reaching for
// Google's services at start.
func Options(bin, dir string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
}

// Screenshot saves the whole page as name.png in t's artifact directory
// (kept with go test -artifacts) and returns its path.
func Screenshot(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Unlabeled is a script that lists the page's controls no assistive
// technology can name: no label, no aria-label, no text.
const Unlabeled = `[...document.querySelectorAll('input, select, textarea, button, a[href]')]
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim())
  .map((el) => el.outerHTML.slice(0, 120))`
