package queueproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/amqpurl"
	"sless.dev/sless/internal/wire"
)

// Config is the queue-proxy's configuration. The controller and the local
// platform set it through the environment variables below (a contract);
// each has a flag of the same meaning.
type Config struct {
	Namespace string // SLESS_NAMESPACE
	Function  string // SLESS_FUNCTION
	// UserPort is where the user process listens on 127.0.0.1.
	UserPort int // SLESS_USER_PORT
	// UserProtocol is what the user process speaks there.
	UserProtocol v1alpha1.Protocol // SLESS_USER_PROTOCOL
	// ServingPort takes the invocations.
	ServingPort int // SLESS_SERVING_PORT
	// AdminPort serves /healthz, /readyz, /stats and /metrics.
	AdminPort int // SLESS_ADMIN_PORT
	// Concurrency is the most requests at the user process at once; 0
	// means no limit (no breaker, nothing waits).
	Concurrency int // SLESS_CONCURRENCY
	// QueueDepth is how many requests may wait for a slot.
	QueueDepth int // SLESS_QUEUE_DEPTH
	// Timeout bounds the wait for an answer to start, queue wait
	// included.
	Timeout time.Duration // SLESS_TIMEOUT_SECONDS
	// IdleTimeout bounds the silence between a streamed answer's bytes
	// (0: none).
	IdleTimeout time.Duration // SLESS_IDLE_TIMEOUT_SECONDS
	// MaxDuration bounds a request whole (less than Timeout: Timeout).
	MaxDuration time.Duration // SLESS_MAX_DURATION_SECONDS
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64 // SLESS_MAX_BODY_BYTES
	// DrainTimeout bounds the drain after SIGTERM.
	DrainTimeout time.Duration // SLESS_DRAIN_SECONDS
	// ReadTimeout bounds how long a client may take to send a request
	// head, or each part of its body.
	ReadTimeout time.Duration // SLESS_READ_TIMEOUT_SECONDS
	// RabbitMQ are the queues to consume (SLESS_RABBITMQ_TRIGGERS), each
	// with its broker URL read from the variable its urlEnv names.
	RabbitMQ []RabbitMQ
	// RetryBackoff is the wait before a failed message's first retry.
	RetryBackoff time.Duration // SLESS_RETRY_BACKOFF_MS
	// RecordsURL is the activators' admin API, where the records of the
	// messages consumed are sent; empty, none are kept (but those of
	// Server.Records).
	RecordsURL string // SLESS_RECORDS_URL
	// PodIP names the instance in records, with ServingPort; the serving
	// listener's address names it without.
	PodIP string // SLESS_POD_IP
}

// RabbitMQ is a trigger to consume and its broker's URL.
type RabbitMQ struct {
	wire.RabbitMQTrigger
	URL string
}

// Setting describes one configuration variable and its flag.
type Setting struct {
	Env, Flag, Default, Usage string
}

// Settings lists the configuration variables in the order they are
// documented, for the command to turn into flags.
var Settings = []Setting{
	{wire.EnvNamespace, "namespace", "default", "namespace of the function (metric label)"},
	{wire.EnvFunction, "function", "", "name of the function (required; metric label)"},
	{wire.EnvUserPort, "user-port", strconv.Itoa(wire.UserPort), "port of the user process on 127.0.0.1"},
	{wire.EnvUserProtocol, "user-protocol", string(v1alpha1.ProtocolHTTP1), "what the user process speaks: http1 or h2c (HTTP/2 without TLS)"},
	{wire.EnvServingPort, "serving-port", strconv.Itoa(wire.ServingPort), "port that takes invocations"},
	{wire.EnvAdminPort, "admin-port", strconv.Itoa(wire.AdminPort), "port of /healthz, /readyz, /stats and /metrics"},
	{wire.EnvConcurrency, "concurrency", "0", "most requests at the user process at once (0 = unlimited)"},
	{wire.EnvQueueDepth, "queue-depth", "", "requests that may wait for a slot (default 10 x concurrency)"},
	{wire.EnvTimeout, "timeout-seconds", "300", "until the answer starts, queue wait included"},
	{wire.EnvIdleTimeout, "idle-timeout-seconds", "0", "longest silence between a streamed answer's bytes (0 = none)"},
	{wire.EnvMaxDuration, "max-duration-seconds", "0", "a request whole, its streamed answer included (0 = the timeout)"},
	{wire.EnvMaxBody, "max-body-bytes", "10485760", "largest request body; larger ones get 413"},
	{wire.EnvDrain, "drain-seconds", "30", "longest drain after SIGTERM"},
	{wire.EnvReadTimeout, "read-timeout-seconds", "10", "most a client may take to send a request head, or each part of its body (408 beyond)"},
	{wire.EnvRabbitMQ, "rabbitmq-triggers", "", "RabbitMQ triggers to consume, a JSON array of {name, queue, urlEnv, prefetch, maxRetries, deadLetterQueue, queueType}"},
	{wire.EnvRetryBackoff, "retry-backoff-ms", "1000", "wait before a failed message's first retry, doubled for each next one"},
	{wire.EnvRecordsURL, "records-url", "", "the activators' admin API (http://host:port), where the records of consumed messages go"},
	{wire.EnvPodIP, "pod-ip", "", "the pod's IP, which with the serving port names the instance in records"},
}

// ParseConfig builds a Config from the variables that lookup returns
// (an environment, or flags mapped to the variable of the same meaning),
// with defaults for the rest. Every invalid value is reported, each error
// naming its variable.
func ParseConfig(lookup func(env string) (string, bool)) (Config, error) {
	p := parser{lookup: lookup}
	c := Config{
		Namespace:    p.str(wire.EnvNamespace),
		Function:     p.str(wire.EnvFunction),
		UserPort:     int(p.int(wire.EnvUserPort, 1, 65535)),
		ServingPort:  p.port(wire.EnvServingPort),
		AdminPort:    p.port(wire.EnvAdminPort),
		Concurrency:  int(p.int(wire.EnvConcurrency, 0, 100_000)),
		Timeout:      time.Duration(p.int(wire.EnvTimeout, 1, 24*3600)) * time.Second,
		IdleTimeout:  time.Duration(p.int(wire.EnvIdleTimeout, 0, 24*3600)) * time.Second,
		MaxDuration:  time.Duration(p.int(wire.EnvMaxDuration, 0, 24*3600)) * time.Second,
		MaxBodyBytes: p.int(wire.EnvMaxBody, 1, math.MaxInt32),
		DrainTimeout: time.Duration(p.int(wire.EnvDrain, 0, 3600)) * time.Second,
		ReadTimeout:  time.Duration(p.int(wire.EnvReadTimeout, 1, 3600)) * time.Second,
	}
	c.RetryBackoff = time.Duration(p.int(wire.EnvRetryBackoff, 1, 3600_000)) * time.Millisecond
	c.RabbitMQ = p.rabbitMQ()
	c.RecordsURL = p.str(wire.EnvRecordsURL)
	c.PodIP = p.str(wire.EnvPodIP)
	c.UserProtocol = p.protocol(wire.EnvUserProtocol)
	c.QueueDepth = 10 * c.Concurrency
	if _, set := p.value(wire.EnvQueueDepth); set {
		c.QueueDepth = int(p.int(wire.EnvQueueDepth, 0, 1_000_000))
	}
	if c.Function == "" {
		p.fail(wire.EnvFunction, "", "must name the function")
	}
	if c.UserPort == c.ServingPort || c.UserPort == c.AdminPort || c.ServingPort != 0 && c.ServingPort == c.AdminPort {
		p.errs = append(p.errs, fmt.Errorf("%s, %s and %s must differ (%d, %d, %d)", wire.EnvUserPort, wire.EnvServingPort, wire.EnvAdminPort, c.UserPort, c.ServingPort, c.AdminPort))
	}
	return c, errors.Join(p.errs...)
}

// rabbitMQ reads the triggers to consume and their brokers' URLs.
func (p *parser) rabbitMQ() []RabbitMQ {
	raw, _ := p.value(wire.EnvRabbitMQ)
	if raw == "" {
		return nil
	}
	var ts []wire.RabbitMQTrigger
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ts); err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: not a JSON array of triggers: %w", wire.EnvRabbitMQ, err))
		return nil
	}
	out := make([]RabbitMQ, 0, len(ts))
	for i, t := range ts {
		where := fmt.Sprintf("%s[%d]", wire.EnvRabbitMQ, i)
		if err := checkTrigger(t); err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		url, _ := p.lookup(t.URLEnv)
		if amqpurl.Check(url) != nil {
			// Not quoted: it may hold a password.
			p.errs = append(p.errs, fmt.Errorf("%s: %s (urlEnv) is not an AMQP URL", where, t.URLEnv))
			continue
		}
		out = append(out, RabbitMQ{RabbitMQTrigger: t, URL: url})
	}
	return out
}

func checkTrigger(t wire.RabbitMQTrigger) error {
	switch {
	case t.Name == "":
		return errors.New("name is required")
	case t.Queue == "":
		return errors.New("queue is required")
	case t.URLEnv == "":
		return errors.New("urlEnv is required")
	case t.Prefetch < 1 || t.Prefetch > 1000:
		return fmt.Errorf("prefetch %d: must be between 1 and 1000", t.Prefetch)
	case t.MaxRetries < 0 || t.MaxRetries > 100:
		return fmt.Errorf("maxRetries %d: must be between 0 and 100", t.MaxRetries)
	case t.QueueType != "" && t.QueueType != v1alpha1.QueueClassic && t.QueueType != v1alpha1.QueueQuorum:
		return fmt.Errorf("queueType %q: must be %s or %s", t.QueueType, v1alpha1.QueueClassic, v1alpha1.QueueQuorum)
	}
	return nil
}

// parser reads variables, falling back to the defaults in Settings, and
// collects errors rather than stopping at the first.
type parser struct {
	lookup func(string) (string, bool)
	errs   []error
}

func (p *parser) value(env string) (string, bool) {
	if v, ok := p.lookup(env); ok {
		return v, true
	}
	for _, s := range Settings {
		if s.Env == env {
			return s.Default, false
		}
	}
	return "", false
}

func (p *parser) str(env string) string {
	v, _ := p.value(env)
	return v
}

func (p *parser) int(env string, lo, hi int64) int64 {
	v, _ := p.value(env)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		p.fail(env, v, "not a whole number")
		return 0
	}
	if n < lo || n > hi {
		p.fail(env, v, fmt.Sprintf("must be between %d and %d", lo, hi))
		return 0
	}
	return n
}

// protocol reads what the user process speaks.
func (p *parser) protocol(env string) v1alpha1.Protocol {
	switch v := v1alpha1.Protocol(p.str(env)); v {
	case v1alpha1.ProtocolHTTP1, v1alpha1.ProtocolH2C:
		return v
	default:
		p.fail(env, string(v), fmt.Sprintf("must be %s or %s", v1alpha1.ProtocolHTTP1, v1alpha1.ProtocolH2C))
		return ""
	}
}

// port reads a port to listen on; 0 picks a free one.
func (p *parser) port(env string) int {
	return int(p.int(env, 0, 65535))
}

func (p *parser) fail(env, value, msg string) {
	p.errs = append(p.errs, fmt.Errorf("%s=%q: %s", env, value, msg))
}
