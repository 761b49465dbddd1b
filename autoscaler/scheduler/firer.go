package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"sless.dev/sless/internal/wire"
)

// HTTPFirer sends fires through an activator's admin API (wire.FirePattern),
// as the autoscaler does on Kubernetes.
type HTTPFirer struct {
	// URL is the activators' admin Service, http://host:port.
	URL string
	// Token, when set, returns the admin API's bearer token at the time
	// of a fire (it may be rotated); "" sends none.
	Token  func() string
	Client *http.Client
}

// fireGrace is how much longer than the function's timeout a fire may take
// to be answered: the activator answers 504 at the timeout.
const fireGrace = 10 * time.Second

// Fire sends f and returns the status the invocation was answered with.
func (h HTTPFirer) Fire(ctx context.Context, f Fire) (int, error) {
	t := f.Trigger
	ctx, cancel := context.WithTimeout(ctx, t.Timeout+fireGrace)
	defer cancel()
	url := strings.TrimSuffix(h.URL, "/") + wire.FirePath(t.Namespace, t.Function, t.Name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(t.Body)))
	if err != nil {
		return 0, fmt.Errorf("fire %s/%s/%s: %w", t.Namespace, t.Function, t.Name, err)
	}
	req.Header.Set(wire.ScheduledTimeHeader, f.Scheduled.UTC().Format(time.RFC3339Nano))
	if h.Token != nil {
		if token := h.Token(); token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("fire %s/%s/%s through the activator: %w", t.Namespace, t.Function, t.Name, err)
	}
	defer resp.Body.Close()
	var answer struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("fire %s/%s/%s: the activator answered %s: %s", t.Namespace, t.Function, t.Name, resp.Status, answer.Error)
	}
	return answer.Status, nil
}
