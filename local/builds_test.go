package local

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"
)

// The queue runs at most max builds at once, urgent ones (changes of
// running functions) before first builds, and drops those cancelled while
// they waited.
func TestBuildsOrder(t *testing.T) {
	q := &builds{max: 1}
	var mu sync.Mutex
	var ran []string
	hold := make(chan struct{})
	add := func(name string, urgent bool) *build {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		b := &build{ctx: ctx, cancel: cancel, urgent: urgent, done: make(chan struct{}), run: func(*build) {
			if name == "first" {
				<-hold
			}
			mu.Lock()
			ran = append(ran, name)
			mu.Unlock()
		}}
		q.add(b)
		return b
	}
	add("first", false)
	add("new-a", false)
	add("change-a", true)
	add("new-b", false).cancel()
	add("change-b", true)
	close(hold)
	q.wait()
	if want := []string{"first", "change-a", "change-b", "new-a"}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
}

// A slow build holds up nothing: while a function's dependencies install
// for minutes (npm runs its preinstall script), another function's change
// is built and served, and requests for the slow one wait; removing it
// cancels its install and answers them.
func TestSlowBuildHoldsUpNothing(t *testing.T) {
	needs.Commands(t, "python3", "node", "npm")
	p := startPlatform(t, manifest("quick", "  scale: {initial: 1}\n"))
	p.waitFor("quick ready", time.Minute, func() bool { return p.status("quick").Ready == 1 })

	pidFile := filepath.Join(t.TempDir(), "npm.pid")
	// The script writes npm's pid and lasts ten minutes, or until npm is
	// gone.
	script := "echo $PPID > " + pidFile + "; i=0; while [ $i -lt 3000 ] && kill -0 $PPID 2>/dev/null; do sleep 0.2; i=$((i+1)); done"
	if err := os.MkdirAll(filepath.Join(p.dir, "slow"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(p.dir, "slow", "package.json"), `{"name": "slow", "version": "1.0.0", "scripts": {"preinstall": "`+script+`"}}`)
	write(t, filepath.Join(p.dir, "slow", "index.js"), `exports.handle = async () => "slow";`)
	write(t, filepath.Join(p.dir, "slow.yaml"), fn("slow", "node", "index.handle"))
	var npm int
	p.waitFor("slow's install to run", time.Minute, func() bool {
		b, err := os.ReadFile(pidFile)
		npm, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && npm > 0
	})

	write(t, filepath.Join(p.dir, "functions.yaml"), manifest("quick", "  scale: {initial: 1}\n  env: [{name: GEN, value: \"2\"}]\n"))
	p.waitFor("quick's change served", time.Minute, func() bool {
		code, a, _ := p.invoke("quick", "")
		return code == 200 && a.Gen == "2"
	})
	if st := p.status("slow"); st.State != "building" {
		t.Fatalf("slow is %s, want still building", st.State)
	}

	answered := make(chan int, 1)
	go func() { code, _, _ := p.invoke("slow", ""); answered <- code }()
	p.waitFor("a request waiting for slow's build", 30*time.Second, func() bool { return p.act.Waiting("default", "slow") == 1 })
	if err := os.Remove(filepath.Join(p.dir, "slow.yaml")); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-answered:
		if code != http.StatusNotFound {
			t.Errorf("the request waiting for slow's build got %d, want 404 once it was removed", code)
		}
	case <-time.After(30 * time.Second):
		t.Error("the request waiting for slow's build not answered once it was removed")
	}
	p.waitFor("slow's install cancelled", 30*time.Second, func() bool { return syscall.Kill(npm, 0) != nil })
	if code := p.statusCode("slow"); code != http.StatusNotFound {
		t.Errorf("slow's status once removed: %d, want 404", code)
	}
}
