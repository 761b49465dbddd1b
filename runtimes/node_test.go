package runtimes

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sless.dev/sless/internal/needs"

	"sless.dev/sless/apis/v1alpha1"
)

// nodeContractHandler answers scriptContractCases and scriptResponseCases.
const nodeContractHandler = `'use strict';
const { Readable } = require('node:stream');

let release;
const released = new Promise((resolve) => { release = resolve; });

async function* events() {
  yield 'data: one\n\n';
  const late = new Promise((resolve) => setTimeout(() => resolve(false), 30000).unref());
  yield (await Promise.race([released.then(() => true), late])) ? 'data: two\n\n' : 'data: late\n\n';
}

async function* failing() {
  yield 'half';
  throw new Error('disk on fire');
}

exports.handle = (event) => {
  const path = event.path;
  if (path.startsWith('/echo')) return event;
  switch (path) {
    case '/respond/404': {
      const headers = new Headers({ 'content-type': 'application/json', 'x-trace': 't1' });
      for (const c of ['a=1; Path=/', 'b=2; Path=/', 'c=3; Path=/']) headers.append('set-cookie', c);
      return new Response(JSON.stringify({ error: 'no such order' }), { status: 404, headers });
    }
    case '/respond/png': return new Response(Buffer.from('\x89PNG\r\n', 'latin1'), { headers: { 'content-type': 'image/png' } });
    case '/respond/created': return new Response(null, { status: 201, headers: { location: '/orders/7' } });
    case '/stream': return Readable.from(['a', 'b', 'c']);
    case '/respond/stream':
      return new Response(Readable.toWeb(Readable.from([Buffer.from('a,b\n'), Buffer.from('1,2\n')])),
        { status: 202, headers: { 'content-type': 'text/csv' } });
    case '/respond/42': return new Response('x', { status: 42 });
    case '/events': return new Response(Readable.toWeb(Readable.from(events())), { headers: { 'content-type': 'text/event-stream' } });
    case '/release': release(); return undefined;
    case '/stream/fail': return failing();
    case '/map': return new Map([[1, 2]]);
    case '/text': return 'hello';
    case '/html': return '<html><body>hi</body></html>';
    case '/bytes': return Buffer.from([0, 1, 255]);
    case '/array': return [1, 'two'];
    case '/none': return undefined;
    case '/fail': throw new Error('boom');
    case '/async': return new Promise((resolve) => setTimeout(() => resolve({ async: true }), 1));
    case '/unencodable': return () => 1;
    case '/crash': process.exit(3);
  }
  return { unknown: path };
};
`

func TestNodeContract(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "node")
	dir := scriptSource(t, map[string]string{"index.js": nodeContractHandler})
	p, _, err := scriptPrepare(t, Source{Runtime: v1alpha1.RuntimeNode, Dir: dir}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inst := scriptLaunchReady(t, p)
	scriptInvoke(t, inst, scriptContractCases("Error"))
	scriptInvoke(t, inst, scriptResponseCases())
	scriptInvoke(t, inst, []scriptCase{{name: "a Map, which JSON would write as {}", method: "GET", target: "/map",
		status: 500, contentType: "application/json", check: scriptErrorNames("a Map cannot be encoded as JSON")}})
	scriptStreamsAsWritten(t, inst)
	scriptStreamFailureCuts(t, inst)
	scriptKeepAlive(t, inst)
	if out := inst.output.String(); !strings.Contains(out, "Error: boom\n    at ") {
		t.Errorf("the error's stack is not on stderr:\n%s", out)
	}
	scriptCrash(t, inst)
}

func TestNodeAsyncFunctionInSubdirectory(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "node")
	dir := scriptSource(t, map[string]string{"lib/app.js": `exports.run = async (event) => {
  await new Promise((resolve) => setImmediate(resolve));
  if (event.query.fail) throw new TypeError('later');
  return { method: event.method };
};
`})
	p, _, err := scriptPrepare(t, Source{Runtime: v1alpha1.RuntimeNode, Dir: dir, Handler: "lib/app.run"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scriptInvoke(t, scriptLaunchReady(t, p), []scriptCase{
		{name: "awaited", method: "PATCH", target: "/", status: 200, contentType: "application/json", check: scriptBodyIs(`{"method":"PATCH"}`)},
		{name: "rejected", method: "GET", target: "/?fail=1", status: 500, contentType: "application/json", check: scriptErrorNames("TypeError: later")},
	})
}

// TestNodeLoadFailures checks that a handler that cannot be loaded ends the
// process with exit code 1 and a message naming what is wrong.
func TestNodeLoadFailures(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "node")
	dir := scriptSource(t, map[string]string{
		"index.js":  "exports.handle = (e) => e;\n",
		"broken.js": "require('not-a-module-anywhere');\n",
	})
	scriptLoadFailures(t, v1alpha1.RuntimeNode, dir, []scriptLoadFailure{
		{"index.missing", []string{`module "index" has no function "missing" (handler index.missing)`}},
		{"broken.handle", []string{"Cannot find module 'not-a-module-anywhere'", `cannot load module "broken" of handler broken.handle from ` + dir}},
	})
}

// TestNodePackagesInstalled installs is-number from the npm registry,
// requires it from the handler, and checks a second Prepare uses the cache:
// by then npm points at a closed port with an empty npm cache, so a second
// install would fail.
func TestNodePackagesInstalled(t *testing.T) {
	needs.Commands(t, "node", "npm")
	dir := scriptSource(t, map[string]string{
		"package.json": `{"name": "fn", "version": "1.0.0", "dependencies": {"is-number": "7.0.0"}}`,
		"index.js":     "const isNumber = require('is-number');\nexports.handle = (event) => ({ isNumber: isNumber(event.query.n) });\n",
	})
	cache := t.TempDir()
	src := Source{Runtime: v1alpha1.RuntimeNode, Dir: dir}
	p, progress, err := scriptPrepare(t, src, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress, "node default/fn: installing package.json") || !strings.Contains(progress, "installed package.json in") {
		t.Errorf("progress = %q, want installing and installed lines", progress)
	}
	scriptInvoke(t, scriptLaunchReady(t, p), []scriptCase{
		{name: "number", method: "GET", target: "/?n=5", status: http.StatusOK, contentType: "application/json", check: scriptBodyIs(`{"isNumber":true}`)},
		{name: "not a number", method: "GET", target: "/?n=five", status: http.StatusOK, contentType: "application/json", check: scriptBodyIs(`{"isNumber":false}`)},
	})
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err == nil {
		t.Error("npm installed into the source directory")
	}
	t.Setenv("npm_config_registry", "http://127.0.0.1:9/")
	t.Setenv("npm_config_cache", t.TempDir())
	again, progress, err := scriptPrepare(t, src, cache)
	if err != nil {
		t.Fatalf("second Prepare installed again: %v", err)
	}
	if progress != "" {
		t.Errorf("second Prepare wrote progress %q, want none", progress)
	}
	if strings.Join(again.Env, " ") != strings.Join(p.Env, " ") {
		t.Errorf("second Prepare env %q, want %q", again.Env, p.Env)
	}
}

// TestNodePackagesFailure checks that a failed npm install is an error
// naming package.json with npm's reason, and leaves nothing cached.
func TestNodePackagesFailure(t *testing.T) {
	needs.Commands(t, "node", "npm")
	dir := scriptSource(t, map[string]string{
		"package.json": `{"name": "fn", "version": "1.0.0", "dependencies": {"is-number": "7.0.0"}}`,
		"index.js":     "exports.handle = (e) => e;\n",
	})
	t.Setenv("npm_config_registry", "http://127.0.0.1:9/")
	t.Setenv("npm_config_cache", t.TempDir())
	t.Setenv("npm_config_fetch_retries", "0")
	_, _, err := scriptPrepare(t, Source{Runtime: v1alpha1.RuntimeNode, Dir: dir}, t.TempDir())
	if err == nil {
		t.Fatal("Prepare succeeded with the registry out of reach")
	}
	for _, want := range []string{"npm install of " + filepath.Join(dir, "package.json"), "ECONNREFUSED"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}
