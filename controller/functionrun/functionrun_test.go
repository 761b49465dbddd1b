package functionrun_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/controller/functionrun"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
	"sless.dev/sless/local"
	"sless.dev/sless/runs"
	"sless.dev/sless/runs/runclient"
)

const echoManifest = `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: echo}
spec:
  runtime: python
  source: ./echo
  scale: {initial: 1}
  async: {maxAttempts: 1}
`

const echoHandler = `import time
def handle(e):
    time.sleep(float(e['query'].get('sleep', '0')))
    if 'fail' in e['query']:
        raise ValueError('asked to fail')
    return {'got': e['body'], 'type': e['headers'].get('content-type', ''), 'run': e['headers'].get('sless-run-id', '')}
`

// startPlatform runs sless dev's platform in this process on the echo
// function: a real activator with runs, and a real Python instance.
func startPlatform(t *testing.T) *runclient.Client {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		needs.Missing(t, "python3: %v", err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "echo"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"echo.yaml": echoManifest, "echo/main.py": echoHandler} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := local.New(local.Options{Dir: dir, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", CacheDir: t.TempDir(),
		Log: slog.New(slog.DiscardHandler), Poll: time.Hour, Drain: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually.True(t, "echo ready", func() bool {
		st, ok := p.Function("default", "echo")
		return ok && st.Ready > 0
	})
	return &runclient.Client{Base: "http://" + p.Addr()}
}

// env is a real API server with the FunctionRun CRD, and a platform
// whose runs API the reconciler calls.
type env struct {
	cfg  *rest.Config
	c    client.Client
	runs *runclient.Client
}

func newEnv(t *testing.T) *env {
	cfg := controlplane.Start(t)
	return &env{cfg: cfg, c: controlplane.Client(t, cfg), runs: startPlatform(t)}
}

// startController runs the FunctionRun reconciler until the test ends.
func (e *env) startController(t *testing.T) {
	t.Helper()
	mo, err := controller.ManagerOptions(false)
	if err != nil {
		t.Fatal(err)
	}
	controlplane.ForTests(&mo)
	mgr, err := manager.New(e.cfg, mo)
	if err != nil {
		t.Fatal(err)
	}
	r := functionrun.New(mgr, functionrun.Options{Runs: e.runs, Poll: 100 * time.Millisecond, MaxPoll: time.Second})
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	controlplane.StartManager(t, mgr)
}

func (e *env) create(t *testing.T, name string, spec v1alpha1.FunctionRunSpec) *v1alpha1.FunctionRun {
	t.Helper()
	fr := &v1alpha1.FunctionRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec}
	if err := e.c.Create(context.Background(), fr); err != nil {
		t.Fatal(err)
	}
	return fr
}

// waitFor waits until the FunctionRun name satisfies cond, and returns it.
func (e *env) waitFor(t *testing.T, name, what string, cond func(*v1alpha1.FunctionRun) bool) *v1alpha1.FunctionRun {
	t.Helper()
	var fr v1alpha1.FunctionRun
	eventually.TrueWithin(t, 2*time.Minute, name+" "+what, func() bool {
		err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &fr)
		return err == nil && cond(&fr)
	})
	return &fr
}

func gone(t *testing.T, e *env, name string) bool {
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &v1alpha1.FunctionRun{})
	return apierrors.IsNotFound(err)
}

func condition(fr *v1alpha1.FunctionRun, typ string) *metav1.Condition {
	return meta.FindStatusCondition(fr.Status.Conditions, typ)
}

// FunctionRuns against a real API server and a real platform: each is
// run once, its status follows its run, deletion cancels it, a TTL
// removes it, and a submission made before a controller restart is not
// made twice.
func TestFunctionRun(t *testing.T) {
	e := newEnv(t)

	// A run submitted under the FunctionRun's UID before the controller
	// wrote its status (it crashed): the controller finds it, not a new
	// one.
	early := e.create(t, "early", v1alpha1.FunctionRunSpec{Function: "echo", Body: &apiextensionsv1.JSON{Raw: []byte(`"early"`)}})
	req, err := runclient.RequestOf(&early.Spec)
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.runs.Submit(context.Background(), "default", "echo", string(early.UID), req)
	if err != nil {
		t.Fatal(err)
	}
	e.startController(t)

	t.Run("succeeds", func(t *testing.T) {
		e.create(t, "ok", v1alpha1.FunctionRunSpec{Function: "echo", Body: &apiextensionsv1.JSON{Raw: []byte(`{"n": 1}`)}})
		fr := e.waitFor(t, "ok", "complete, its finalizer gone", func(fr *v1alpha1.FunctionRun) bool {
			return condition(fr, v1alpha1.ConditionComplete) != nil && len(fr.Finalizers) == 0
		})
		st := fr.Status
		if st.Phase != v1alpha1.FunctionRunSucceeded || st.Attempts != 1 || !runs.ValidID(st.RunID) || st.StartedAt == nil ||
			st.CompletedAt == nil || st.Result == nil || st.Result.Status != 200 || condition(fr, v1alpha1.ConditionFailed) != nil {
			t.Fatalf("status %+v", st)
		}
		for _, want := range []string{`"got":"{\"n\":1}"`, `"type":"application/json"`, `"run":"` + st.RunID + `"`} {
			if !strings.Contains(st.Result.Body, want) {
				t.Errorf("result body %q, want %s in it", st.Result.Body, want)
			}
		}
		if c := condition(fr, v1alpha1.ConditionComplete); c.Reason != v1alpha1.ReasonSucceeded || c.Status != metav1.ConditionTrue {
			t.Errorf("Complete: %+v", c)
		}
	})
	t.Run("fails", func(t *testing.T) {
		e.create(t, "bad", v1alpha1.FunctionRunSpec{Function: "echo", Path: "/?fail=1"})
		fr := e.waitFor(t, "bad", "failed", func(fr *v1alpha1.FunctionRun) bool { return condition(fr, v1alpha1.ConditionFailed) != nil })
		c := condition(fr, v1alpha1.ConditionFailed)
		if fr.Status.Phase != v1alpha1.FunctionRunFailed || c.Reason != v1alpha1.ReasonRunFailed || fr.Status.Result == nil ||
			fr.Status.Result.Status != 500 || !strings.Contains(fr.Status.Result.Body, "asked to fail") || condition(fr, v1alpha1.ConditionComplete) != nil {
			t.Errorf("status %+v", fr.Status)
		}
	})
	t.Run("unknown function", func(t *testing.T) {
		e.create(t, "nobody", v1alpha1.FunctionRunSpec{Function: "nobody"})
		e.waitFor(t, "nobody", "pending, saying why", func(fr *v1alpha1.FunctionRun) bool {
			return fr.Status.Phase == v1alpha1.FunctionRunPending && strings.Contains(fr.Status.Error, "no Function nobody in namespace default")
		})
	})
	t.Run("deleted while running", func(t *testing.T) {
		e.create(t, "slow", v1alpha1.FunctionRunSpec{Function: "echo", Path: "/?sleep=30"})
		fr := e.waitFor(t, "slow", "running", func(fr *v1alpha1.FunctionRun) bool { return fr.Status.Phase == v1alpha1.FunctionRunRunning })
		if err := e.c.Delete(context.Background(), fr); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, "slow gone", func() bool { return gone(t, e, "slow") })
		r, err := e.runs.Get(context.Background(), runs.ID(fr.Status.RunID), 0)
		if err != nil || r.State != runs.Cancelled {
			t.Errorf("the run of a FunctionRun deleted: %+v %v, want cancelled", r, err)
		}
	})
	t.Run("ttl", func(t *testing.T) {
		e.create(t, "brief", v1alpha1.FunctionRunSpec{Function: "echo", TTLSecondsAfterFinished: ptr.To[int32](1)})
		eventually.TrueWithin(t, 2*time.Minute, "brief deleted after it ended", func() bool { return gone(t, e, "brief") })
	})
	t.Run("submitted once", func(t *testing.T) {
		fr := e.waitFor(t, "early", "complete", func(fr *v1alpha1.FunctionRun) bool { return fr.Status.Phase.Ended() })
		if fr.Status.RunID != string(first.ID) || fr.Status.Phase != v1alpha1.FunctionRunSucceeded {
			t.Errorf("early: run %s %s, want the run submitted before, %s, succeeded", fr.Status.RunID, fr.Status.Phase, first.ID)
		}
	})
}
