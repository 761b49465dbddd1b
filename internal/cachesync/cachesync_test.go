package cachesync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		synced  func(context.Context) bool
		wantErr string // "" for nil
	}{
		{"synced", context.Background(), func(context.Context) bool { return true }, ""},
		{"timed out", context.Background(), func(ctx context.Context) bool { <-ctx.Done(); return false },
			"pods did not sync within 10ms: check that the tester's ServiceAccount may list and watch them"},
		{"stopping", cancelled, func(ctx context.Context) bool { <-ctx.Done(); return false }, "pods: context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Wait(tt.ctx, 10*time.Millisecond, tt.synced, "tester", "pods")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Wait = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Fatalf("Wait = %v, want %q", err, tt.wantErr)
			}
		})
	}
	err := Wait(cancelled, time.Minute, func(ctx context.Context) bool { <-ctx.Done(); return false }, "tester", "pods")
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "ServiceAccount") {
		t.Errorf("Wait after the caller stopped = %v, want context.Canceled and no RBAC hint", err)
	}
}
