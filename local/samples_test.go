package local

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	echopb "google.golang.org/grpc/examples/features/proto/echo"
	"google.golang.org/grpc/status"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
	"sless.dev/sless/internal/testfn"
)

// samplesDir is the directory `sless dev` serves by default.
const samplesDir = "../config/samples/functions"

// postgresAddr is the PostgreSQL the samples' manifests point at.
const postgresAddr = "127.0.0.1:5432"

// samples are the functions of samplesDir; the test fails when the
// directory holds others, so a new sample comes with its case.
var samples = []string{
	"grpc-go", "hello-go", "hello-node", "hello-python", "http-go", "http-node", "http-python",
	"stress-bigloop", "stress-crash", "stress-divzero", "stress-go-fast", "stress-go-nil",
	"stress-go-pgstorm", "stress-js-async", "stress-js-badenv", "stress-slow", "stress-writer",
}

// TestSamples serves the real samples as `sless dev` does and calls each
// through the activator: the answers, the bad inputs, the failures an
// instance survives, and the crash it does not.
func TestSamples(t *testing.T) {
	needs.Commands(t, "python3", "node", "npm", "go")
	pgErr := postgresUp()
	if pgErr != nil && needs.CI() {
		t.Fatalf("PostgreSQL is required in CI: %v", pgErr)
	}
	p := startSamples(t)
	p.waitForSamples()

	t.Run("answers", func(t *testing.T) { p.with(t).checkAnswers(pgErr) })
	t.Run("answers of their own", func(t *testing.T) { p.with(t).checkOwnAnswers() })
	t.Run("failures the instance survives", func(t *testing.T) { p.with(t).checkSurvivors() })
	t.Run("crash and restart", func(t *testing.T) { p.with(t).checkCrash() })
}

func (p *platform) checkAnswers(pgErr error) {
	const slept = 0.2
	tests := []struct {
		name, fn, query string
		needsPG         bool
		code            int
		want            map[string]any // fields of a 200 answer
		errContains     string         // in the error of a 500 answer
		check           func(answer map[string]any) error
	}{
		{name: "hello go", fn: "hello-go", query: "name=you", code: 200,
			want: map[string]any{"message": "hello you", "runtime": "go", "method": "GET"}},
		{name: "hello python", fn: "hello-python", query: "name=you", code: 200,
			want: map[string]any{"message": "hello you", "runtime": "python", "method": "GET"}},
		{name: "hello node", fn: "hello-node", query: "name=you", code: 200,
			want: map[string]any{"message": "hello you", "runtime": "node", "method": "GET"}},
		{name: "slow sleeps", fn: "stress-slow", query: fmt.Sprint("seconds=", slept), code: 200,
			want: map[string]any{"seconds": slept}, check: atLeast("slept", slept)},
		{name: "slow refuses 301 seconds", fn: "stress-slow", query: "seconds=301", code: 500,
			errContains: "seconds must be between 0 and 300"},
		{name: "bigloop loops", fn: "stress-bigloop", query: "n=1000000", code: 200,
			want: map[string]any{"n": 1e6, "result": float64(bigloop(1e6))}},
		{name: "bigloop refuses a fraction", fn: "stress-bigloop", query: "n=1.5", code: 500,
			errContains: "RangeError: n must be an integer"},
		{name: "divzero divides", fn: "stress-divzero", query: "n=7&d=2", code: 200,
			want: map[string]any{"n": 7.0, "d": 2.0, "result": 3.5}},
		{name: "go-fast computes", fn: "stress-go-fast", query: "n=20", code: 200,
			want: map[string]any{"n": 20.0, "factorial": "2432902008176640000", "fibonacci": "6765"}},
		{name: "go-fast refuses a negative n", fn: "stress-go-fast", query: "n=-1", code: 500,
			errContains: "n must be an integer between 0 and 5000"},
		{name: "go-nil refuses nil=2", fn: "stress-go-nil", query: "nil=2", code: 500,
			errContains: `nil must be 0 or 1, not "2"`},
		{name: "badenv reads its manifest's env", fn: "stress-js-badenv", code: 200,
			want: map[string]any{"greeting": "hello from the manifest", "variable": "GREETING"}},
		{name: "crash answers when not asked to crash", fn: "stress-crash", query: "crash=0", code: 200,
			want: map[string]any{"ok": true}},
		{name: "writer refuses 0 rows", fn: "stress-writer", query: "rows=0", code: 500,
			errContains: "rows must be an integer between 1 and 10000"},
		{name: "writer inserts", fn: "stress-writer", query: "rows=50", needsPG: true, code: 200,
			want: map[string]any{"rows": 50.0, "inserted": 50.0, "batchRows": 50.0, "server": postgresAddr}},
		{name: "js-async queries", fn: "stress-js-async", needsPG: true, code: 200,
			// The count runs beside the INSERT: on a new table it may be 0.
			want:  map[string]any{"queries": 3.0, "server": postgresAddr},
			check: func(a map[string]any) error { return errors.Join(allPositive("insertedId")(a), atLeast("rows", 0)(a)) }},
		{name: "pgstorm refuses 17 workers", fn: "stress-go-pgstorm", query: "workers=17", code: 500,
			errContains: "workers must be an integer between 1 and 16"},
		{name: "pgstorm storms", fn: "stress-go-pgstorm", query: "workers=4&seconds=2", needsPG: true, code: 200,
			want:  map[string]any{"workers": 4.0, "seconds": 2.0, "errors": 0.0, "server": postgresAddr},
			check: allPositive("ok", "opsPerSecond", "byOperation.insert", "byOperation.count", "byOperation.max")},
	}
	for _, tt := range tests {
		p.t.Run(tt.name, func(t *testing.T) {
			if tt.needsPG && pgErr != nil {
				t.Skipf("PostgreSQL not reachable at %s: %v", postgresAddr, pgErr)
			}
			code, answer := p.with(t).call(tt.fn, tt.query)
			if code != tt.code {
				t.Fatalf("%s?%s answered %d %v, want %d", tt.fn, tt.query, code, answer, tt.code)
			}
			if tt.code != 200 {
				if msg, _ := answer["error"].(string); !strings.Contains(msg, tt.errContains) {
					t.Errorf("error %q, want it to contain %q", msg, tt.errContains)
				}
				return
			}
			for key, want := range tt.want {
				if got := answer[key]; !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %#v, want %#v (answer %v)", key, got, want, answer)
				}
			}
			if tt.check != nil {
				if err := tt.check(answer); err != nil {
					t.Errorf("%v (answer %v)", err, answer)
				}
			}
		})
	}
}

// checkOwnAnswers calls the http samples, which choose their answers in
// each runtime's idiom: the status, the cookies in order, the type and the
// stream pass the platform as the function gave them.
func (p *platform) checkOwnAnswers() {
	pixel, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
	for _, fn := range []string{"http-go", "http-python", "http-node"} {
		for _, tt := range []struct {
			path        string
			code        int
			contentType string
			body        string // the exact body, or a JSON value
			cookies     []string
		}{
			{"/orders/7", 200, "application/json", `{"id":"7","item":"tea"}`, nil},
			{"/orders/8", 404, "application/json", `{"error":"no order 8"}`, []string{"a=1; Path=/", "b=2; Path=/"}},
			{"/pixel.png", 200, "image/png", string(pixel), nil},
			{"/events?n=3&every=10ms", 200, "text/event-stream", "data: 0\n\ndata: 1\n\ndata: 2\n\n", nil},
			{"/events?n=x", 400, "application/json", "", nil},
		} {
			p.t.Run(fn+tt.path, func(t *testing.T) {
				resp, err := p.client.Get("http://" + p.Addr() + "/fn/default/" + fn + tt.path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode != tt.code || mt != tt.contentType ||
					!slices.Equal(resp.Header.Values("Set-Cookie"), tt.cookies) {
					t.Errorf("%d %q, cookies %q: want %d %s, cookies %q", resp.StatusCode, resp.Header.Get("Content-Type"),
						resp.Header.Values("Set-Cookie"), tt.code, tt.contentType, tt.cookies)
				}
				if tt.body != "" && !sameBody(body, tt.body, tt.contentType) {
					t.Errorf("body %q, want %q", body, tt.body)
				}
			})
		}
	}
	p.t.Run("http-go/chat", func(t *testing.T) {
		conn, _ := testfn.DialWebSocket(t, "ws://"+p.Addr()+"/fn/default/http-go/chat")
		testfn.CheckEcho(t, conn)
		testfn.CloseHandshake(t, conn)
	})
	p.t.Run("grpc-go", func(t *testing.T) { p.with(t).checkGRPC() })
}

// checkGRPC calls the gRPC sample by host, as gRPC clients must: a unary
// call, its error, and a streamed answer.
func (p *platform) checkGRPC() {
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("grpc-go.default."+Domain))
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close()
	echo := echopb.NewEchoClient(conn)
	ctx := p.t.Context()
	if resp, err := echo.UnaryEcho(ctx, &echopb.EchoRequest{Message: "hi"}); err != nil || resp.GetMessage() != "hi" {
		p.t.Errorf("UnaryEcho(hi) = %v, %v", resp, err)
	}
	if _, err := echo.UnaryEcho(ctx, &echopb.EchoRequest{}); status.Code(err) != codes.InvalidArgument {
		p.t.Errorf("UnaryEcho() = %v, want InvalidArgument", err)
	}
	stream, err := echo.ServerStreamingEcho(ctx, &echopb.EchoRequest{Message: "hey"})
	if err != nil {
		p.t.Fatal(err)
	}
	var got []string
	for {
		m, err := stream.Recv()
		if err != nil {
			if err != io.EOF {
				p.t.Errorf("stream: %v", err)
			}
			break
		}
		got = append(got, m.GetMessage())
	}
	if want := []string{"hey 1", "hey 2", "hey 3"}; !slices.Equal(got, want) {
		p.t.Errorf("streamed %q, want %q", got, want)
	}
}

// sameBody compares a body with want, as JSON values when it is JSON.
func sameBody(body []byte, want, contentType string) bool {
	if contentType != "application/json" {
		return string(body) == want
	}
	var got, w any
	return json.Unmarshal(body, &got) == nil && json.Unmarshal([]byte(want), &w) == nil && reflect.DeepEqual(got, w)
}

// checkSurvivors makes each function fail and checks that the same
// process answers the next request.
func (p *platform) checkSurvivors() {
	tests := []struct{ fn, fail, errContains string }{
		{"stress-divzero", "d=0", "ZeroDivisionError: division by zero"},
		{"stress-go-nil", "nil=1", "panic: runtime error: invalid memory address or nil pointer dereference"},
		{"stress-js-badenv", "bad=1", "TypeError: Cannot read properties of undefined (reading 'trim')"},
	}
	for _, tt := range tests {
		p.t.Run(tt.fn, func(t *testing.T) {
			p := p.with(t)
			before := p.pid(tt.fn)
			code, answer := p.call(tt.fn, tt.fail)
			if msg, _ := answer["error"].(string); code != 500 || !strings.Contains(msg, tt.errContains) {
				t.Errorf("%s?%s answered %d %v, want 500 with an error containing %q", tt.fn, tt.fail, code, answer, tt.errContains)
			}
			if after := p.pid(tt.fn); after != before {
				t.Errorf("pid %d after the failure, want %d: the process did not survive it", after, before)
			}
		})
	}
}

// checkCrash ends stress-crash's process: the platform counts the crash
// and a new process answers.
func (p *platform) checkCrash() {
	const fn = "stress-crash"
	before := p.pid(fn)
	crashes := p.status(fn).Crashes
	if code, answer := p.call(fn, "crash=1"); code == 200 {
		p.t.Fatalf("crash=1 answered 200 %v", answer)
	}
	p.waitFor("the crash counted", time.Minute, func() bool { return p.status(fn).Crashes > crashes })
	if st := p.status(fn); !strings.Contains(st.LastCrash, "exit status 1") {
		p.t.Errorf("last crash %q, want exit status 1", st.LastCrash)
	}
	if after := p.pid(fn); after == before {
		p.t.Errorf("the same pid %d answered after the crash", after)
	}
}

func postgresUp() error {
	conn, err := net.DialTimeout("tcp", postgresAddr, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// startSamples runs the platform on samplesDir with a cache of its own,
// so every function is prepared as on a first `sless dev`.
func startSamples(t *testing.T) *platform {
	t.Helper()
	return runPlatform(t, samplesDir, 500*time.Millisecond)
}

// waitForSamples waits until every sample is prepared and has a ready
// instance or none (it may have scaled to zero while the others built).
// Go builds are the slow part: pgx's first build takes a minute on two
// cores.
func (p *platform) waitForSamples() {
	const within = 10 * time.Minute // a cold Go build cache compiles the standard library first
	var seen []string
	if !eventually.Holds(within, func() bool {
		seen = seen[:0]
		prepared := 0
		for _, st := range p.functions() {
			if st.State == "failed" {
				p.t.Fatalf("%s failed: %s", st.Name, st.Error)
			}
			if st.State == "ready" || st.State == "idle" {
				prepared++
			}
			seen = append(seen, st.Name+": "+string(st.State))
		}
		return prepared == len(samples) && len(seen) == len(samples)
	}) {
		p.t.Fatalf("after %s the platform has %v, want every one of %v ready or idle", within, seen, samples)
	}
	var names []string
	for _, st := range p.functions() {
		names = append(names, st.Name)
	}
	if !slices.Equal(names, samples) {
		p.t.Fatalf("the samples are %v, want %v: a new sample needs its case here", names, samples)
	}
}

// with is p reporting to t, for use in subtests.
func (p *platform) with(t *testing.T) *platform {
	q := *p
	q.t = t
	return &q
}

func (p *platform) functions() []FunctionStatus {
	p.t.Helper()
	resp, err := p.client.Get("http://" + p.AdminAddr() + "/v1/functions")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Functions []FunctionStatus }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		p.t.Fatal(err)
	}
	return list.Functions
}

// call invokes a function through the activator and decodes its JSON
// answer.
func (p *platform) call(fn, query string) (int, map[string]any) {
	p.t.Helper()
	resp, err := p.client.Get("http://" + p.Addr() + "/fn/default/" + fn + "?" + query)
	if err != nil {
		p.t.Fatalf("%s?%s: %v", fn, query, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatalf("%s?%s: %v", fn, query, err)
	}
	var answer map[string]any
	if err := json.Unmarshal(body, &answer); err != nil {
		return resp.StatusCode, map[string]any{"body": string(body)}
	}
	return resp.StatusCode, answer
}

// pid asks fn for the pid of the process that answers it.
func (p *platform) pid(fn string) int {
	p.t.Helper()
	code, answer := p.call(fn, "")
	pid, ok := answer["pid"].(float64)
	if code != 200 || !ok {
		p.t.Fatalf("%s answered %d %v, want 200 with a pid", fn, code, answer)
	}
	return int(pid)
}

// bigloop is stress-bigloop's loop.
func bigloop(n int) int {
	acc := 0
	for i := range n {
		acc = (acc + i) % 1_000_003
	}
	return acc
}

// atLeast checks that a number in the answer is at least least.
func atLeast(key string, least float64) func(map[string]any) error {
	return func(answer map[string]any) error {
		if v, ok := answer[key].(float64); !ok || v < least {
			return fmt.Errorf("%s = %v, want at least %v", key, answer[key], least)
		}
		return nil
	}
}

// allPositive checks numbers in the answer, a dotted key reaching into an
// object.
func allPositive(keys ...string) func(map[string]any) error {
	return func(answer map[string]any) error {
		for _, key := range keys {
			var v any = answer
			for part := range strings.SplitSeq(key, ".") {
				obj, _ := v.(map[string]any)
				v = obj[part]
			}
			if n, ok := v.(float64); !ok || n <= 0 {
				return fmt.Errorf("%s = %v, want a positive number", key, v)
			}
		}
		return nil
	}
}
