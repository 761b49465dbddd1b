package queueproxy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/wire"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want func(Config) bool
		errs []string
	}{
		{name: "defaults", env: map[string]string{"SLESS_FUNCTION": "f"}, want: func(c Config) bool {
			return reflect.DeepEqual(c, Config{Namespace: "default", Function: "f", UserPort: 8080, UserProtocol: v1alpha1.ProtocolHTTP1, ServingPort: 8012, AdminPort: 9091,
				Timeout: 300 * time.Second, MaxBodyBytes: 10 << 20, DrainTimeout: 30 * time.Second, ReadTimeout: 10 * time.Second,
				RetryBackoff: time.Second})
		}},
		{name: "queue depth follows concurrency", env: map[string]string{"SLESS_FUNCTION": "f", "SLESS_CONCURRENCY": "7"},
			want: func(c Config) bool { return c.Concurrency == 7 && c.QueueDepth == 70 }},
		{name: "explicit queue depth", env: map[string]string{"SLESS_FUNCTION": "f", "SLESS_CONCURRENCY": "7", "SLESS_QUEUE_DEPTH": "0"},
			want: func(c Config) bool { return c.QueueDepth == 0 }},
		{name: "everything set", env: map[string]string{"SLESS_NAMESPACE": "ns", "SLESS_FUNCTION": "f", "SLESS_USER_PORT": "9000",
			"SLESS_SERVING_PORT": "0", "SLESS_ADMIN_PORT": "9001", "SLESS_TIMEOUT_SECONDS": "5", "SLESS_MAX_BODY_BYTES": "100", "SLESS_DRAIN_SECONDS": "0",
			"SLESS_READ_TIMEOUT_SECONDS": "2", "SLESS_USER_PROTOCOL": "h2c"},
			want: func(c Config) bool {
				return c.Namespace == "ns" && c.UserPort == 9000 && c.UserProtocol == v1alpha1.ProtocolH2C && c.ServingPort == 0 && c.AdminPort == 9001 &&
					c.Timeout == 5*time.Second && c.MaxBodyBytes == 100 && c.DrainTimeout == 0 && c.ReadTimeout == 2*time.Second
			}},
		{name: "all errors named", env: map[string]string{"SLESS_CONCURRENCY": "-1", "SLESS_TIMEOUT_SECONDS": "soon", "SLESS_USER_PORT": "70000", "SLESS_MAX_BODY_BYTES": "0",
			"SLESS_READ_TIMEOUT_SECONDS": "0", "SLESS_USER_PROTOCOL": "h3"},
			errs: []string{`SLESS_USER_PROTOCOL="h3": must be http1 or h2c`, `SLESS_READ_TIMEOUT_SECONDS="0": must be between 1 and 3600`, `SLESS_CONCURRENCY="-1": must be between 0 and 100000`, `SLESS_TIMEOUT_SECONDS="soon": not a whole number`,
				`SLESS_USER_PORT="70000"`, `SLESS_MAX_BODY_BYTES="0"`, `SLESS_FUNCTION="": must name the function`}},
		{name: "rabbitmq triggers", env: map[string]string{"SLESS_FUNCTION": "f", "AMQP_0": "amqp://u:p@broker:5672/v", "SLESS_RETRY_BACKOFF_MS": "50",
			"SLESS_POD_IP": "10.0.0.7", "SLESS_RECORDS_URL": "http://activator:9090",
			"SLESS_RABBITMQ_TRIGGERS": `[{"name":"orders","queue":"orders","urlEnv":"AMQP_0","prefetch":5,"maxRetries":2,"deadLetterQueue":"orders.dlq","queueType":"quorum"}]`},
			want: func(c Config) bool {
				return reflect.DeepEqual(c.RabbitMQ, []RabbitMQ{{URL: "amqp://u:p@broker:5672/v", RabbitMQTrigger: wire.RabbitMQTrigger{
					Name: "orders", Queue: "orders", URLEnv: "AMQP_0", Prefetch: 5, MaxRetries: 2, DeadLetterQueue: "orders.dlq", QueueType: v1alpha1.QueueQuorum}}}) &&
					c.RetryBackoff == 50*time.Millisecond && c.PodIP == "10.0.0.7" && c.RecordsURL == "http://activator:9090"
			}},
		{name: "rabbitmq errors, URLs not quoted", env: map[string]string{"SLESS_FUNCTION": "f", "BAD": "http://u:secret@x",
			"SLESS_RABBITMQ_TRIGGERS": `[{"name":"a","queue":"q","urlEnv":"BAD","prefetch":1},{"name":"b","queue":"q","urlEnv":"NONE","prefetch":1},{"name":"c","queue":"","urlEnv":"X","prefetch":1},{"name":"d","queue":"q","urlEnv":"BAD","prefetch":0},{"name":"e","queue":"q","urlEnv":"BAD","prefetch":1,"queueType":"stream"}]`},
			errs: []string{"[0]: BAD (urlEnv) is not an AMQP URL", "[1]: NONE (urlEnv) is not an AMQP URL", "[2]: queue is required", "[3]: prefetch 0",
				`[4]: queueType "stream": must be classic or quorum`}},
		{name: "rabbitmq not JSON", env: map[string]string{"SLESS_FUNCTION": "f", "SLESS_RABBITMQ_TRIGGERS": `{"name":"a"}`},
			errs: []string{"SLESS_RABBITMQ_TRIGGERS: not a JSON array"}},
		{name: "port clash", env: map[string]string{"SLESS_FUNCTION": "f", "SLESS_USER_PORT": "9091"},
			errs: []string{"must differ"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if len(tt.errs) == 0 {
				if err != nil || !tt.want(c) {
					t.Fatalf("ParseConfig = %+v, %v", c, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseConfig = %+v, want errors %q", c, tt.errs)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q quotes a URL's password", err)
			}
			for _, e := range tt.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q lacks %q", err, e)
				}
			}
		})
	}
}
