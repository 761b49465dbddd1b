package amqpurl

import (
	"strings"
	"testing"
)

func TestCheckNeverQuotesTheURL(t *testing.T) {
	for _, raw := range []string{
		"amqp://guest:s3cret@127.0.0.1:5672/",
		"amqps://guest:s3cret@broker/vhost",
	} {
		if err := Check(raw); err != nil {
			t.Errorf("Check(%q) = %v, want nil", raw, err)
		}
	}
	for _, raw := range []string{
		"redis://guest:s3cret@host/",
		"amqp://guest:s3cret@host:port/",
		"amqp://guest:s3cret@host/%zz",
		"",
	} {
		err := Check(raw)
		if err == nil {
			t.Errorf("Check(%q) = nil, want an error", raw)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Check(%q) = %q: quotes the password", raw, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"amqp://guest:s3cret@127.0.0.1:5672/": "amqp://guest:xxxxx@127.0.0.1:5672/",
		"amqp://127.0.0.1/":                   "amqp://127.0.0.1/",
		"amqp://guest:s3cret@host/%zz":        "(invalid URL)",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}
