package runtimes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/needs"
)

// An image's build loads a Python or Node handler as its process would
// start, with the Function's variables: a module that does not compile or
// import, or lacks the handler, fails the build with the runtime's own
// message; one that loads builds. The handler is not called.
func TestPrepareImageChecksTheHandlerLoads(t *testing.T) {
	needs.Commands(t, "python3", "node")
	for _, tt := range []struct {
		name    string
		runtime v1alpha1.Runtime
		file    string // the handler's module, main.py or index.js
		code    string
		env     []string
		want    []string // in the error; none: it builds
	}{
		{"python loads", v1alpha1.RuntimePython, "main.py", "import os\nGREETING = os.environ['GREETING']\n\ndef handle(event):\n    raise SystemExit('called')\n",
			[]string{"GREETING=hi"}, nil},
		{"python syntax error", v1alpha1.RuntimePython, "main.py", "def handle(event)\n    return 1\n", nil,
			[]string{"does not load", "SyntaxError", "main.py\", line 1", "cannot import module 'main' of handler main.handle"}},
		{"python without its handler", v1alpha1.RuntimePython, "main.py", "def other(event):\n    return 1\n", nil,
			[]string{"does not load", "has no function 'handle' (handler main.handle)"}},
		{"python variable missing", v1alpha1.RuntimePython, "main.py", "import os\nGREETING = os.environ['GREETING']\n\ndef handle(event):\n    return 1\n", nil,
			[]string{"KeyError: 'GREETING'"}},
		{"node loads", v1alpha1.RuntimeNode, "index.js", "if (!process.env.GREETING) throw new Error('no greeting');\nexports.handle = () => { process.exit(3); };\n",
			[]string{"GREETING=hi"}, nil},
		{"node syntax error", v1alpha1.RuntimeNode, "index.js", "exports.handle = (e) => {\n", nil,
			[]string{"does not load", "SyntaxError", "cannot load module \"index\" of handler index.handle"}},
		{"node without its handler", v1alpha1.RuntimeNode, "index.js", "exports.other = () => 1;\n", nil,
			[]string{"does not load", "module \"index\" has no function \"handle\" (handler index.handle)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(tt.code), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			handler := (&v1alpha1.FunctionSpec{Runtime: tt.runtime}).EffectiveHandler()
			_, err := PrepareImage(ctx, Source{Namespace: "default", Name: "fn", Runtime: tt.runtime, Dir: dir, Handler: handler, Env: tt.env},
				Options{CacheDir: t.TempDir()})
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("PrepareImage: %v", err)
				}
				return
			}
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("PrepareImage: %v\nwant %q in it", err, want)
				}
			}
		})
	}
}
