package local

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/wire"
)

// headersHandler answers the headers its function was called with.
const headersHandler = `def handle(event):
    return event["headers"]
`

// forged are a caller's headers that pass for the platform's.
var forged = map[string]string{
	wire.MessageIDHeader: "m-1", wire.DeliveryCountHeader: "1", wire.TriggerHeader: "orders",
	wire.QueueHeader: "orders", wire.ScheduledTimeHeader: "2026-01-01T00:00:00Z",
	"sless-routing-key": "lower case", "X-Kept": "yes",
}

// A caller cannot forge the platform's headers, through /fn/ or the admin
// API's invoke: the function sees none of them, and the caller's others.
func TestReservedHeadersStripped(t *testing.T) {
	p := startPlatformCode(t, headersHandler, manifest("heads", "  scale: {initial: 1}\n"), withToken)
	p.waitFor("ready", time.Minute, func() bool { return p.status("heads").State == "ready" })

	req, err := http.NewRequest(http.MethodGet, "http://"+p.Addr()+"/fn/default/heads", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range forged {
		req.Header.Set(k, v)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var seen map[string]string
	err = json.NewDecoder(resp.Body).Decode(&seen)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/fn/: %d %v", resp.StatusCode, err)
	}
	checkNoReserved(t, "/fn/", seen)

	body, _ := json.Marshal(adminapi.Invocation{Method: "POST", Path: "/", Headers: forged, Body: "{}"})
	var res adminapi.InvocationResult
	if code := p.admin("POST", fnPath+"heads/invoke", string(body), &res); code != 200 || res.Status != 200 {
		t.Fatalf("invoke: %d, answer %+v", code, res)
	}
	seen = nil
	if err := json.Unmarshal([]byte(res.Body), &seen); err != nil {
		t.Fatalf("invoke's answer %q: %v", res.Body, err)
	}
	checkNoReserved(t, "invoke", seen)
}

func checkNoReserved(t *testing.T, route string, headers map[string]string) {
	t.Helper()
	for k, v := range headers {
		if strings.HasPrefix(strings.ToLower(k), strings.ToLower(wire.HeaderPrefix)) {
			t.Errorf("%s: the function saw %s: %s, which the caller sent", route, k, v)
		}
	}
	if headers["x-kept"] != "yes" {
		t.Errorf("%s: the function saw %v, without the caller's X-Kept", route, headers)
	}
}

// A Python function behind the platform: the activator's limit of header
// fields is the one a caller meets, answered in the platform's JSON (the
// runtime's own, 100 fields, refused a head within it with an HTML page,
// once the platform had added its fields).
func TestHeadLimitPython(t *testing.T) {
	p := startPlatformCode(t, headersHandler, manifest("heads", "  scale: {initial: 1}\n"))
	p.waitFor("ready", time.Minute, func() bool { return p.status("heads").State == "ready" })
	call := func(fields int) (int, string, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+p.Addr()+"/fn/default/heads", nil)
		if err != nil {
			t.Fatal(err)
		}
		// Go's client adds Host, User-Agent and Accept-Encoding.
		for i := range fields - 3 {
			req.Header.Set(fmt.Sprintf("X-F%03d", i), "v")
		}
		resp, err := p.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}
	if code, _, body := call(forward.MaxHeaderFields); code != 200 || !strings.Contains(body, `"x-f096":"v"`) {
		t.Errorf("%d fields: %d %.200s, want 200", forward.MaxHeaderFields, code, body)
	}
	code, ct, body := call(forward.MaxHeaderFields + 1)
	if code != 431 || ct != "application/json" || !strings.Contains(body, `"error":"request header has more than 100 fields"`) {
		t.Errorf("%d fields: %d %s %.200s, want the activator's 431 in JSON", forward.MaxHeaderFields+1, code, ct, body)
	}
}
