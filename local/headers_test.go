package local

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/adminapi"
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
