// Package wire holds the contract the components share across process
// boundaries: the labels the controller puts on a function's objects and
// the watchers select by, the ports of a function's pod, the queue-proxy's
// environment, the metadata of the external-push trigger KEDA sends the
// autoscaler, and the routes and bodies the components call each other
// with (the queue-proxy's stats, the activators' pokes and buffered
// reports, the autoscaler's view). Each is defined here once, so that the writer and the
// readers cannot drift; users, dashboards and scripts depend on them too.
package wire

import (
	"strings"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
)

// Labels on every object the controller creates for a function, and on
// its pods. The activator and the autoscaler find a function's
// EndpointSlices by FunctionLabel (the slices inherit the Service's
// labels); its value is the function's name, and the object's namespace
// is the function's.
const (
	FunctionLabel  = "sless.dev/function"
	NamespaceLabel = "sless.dev/namespace"
)

// Ports of a function's pod: the user process on 127.0.0.1 (the runtime
// contract's PORT), and the queue-proxy's serving and admin ports, named
// in the function's Service so that the watchers find them.
const (
	UserPort        = 8080
	ServingPort     = 8012
	AdminPort       = 9091
	ServingPortName = "http"
	AdminPortName   = "admin"
)

// WaitForDrainPath is the queue-proxy's admin route (GET) that the
// function container's preStop hook calls: it answers once the
// queue-proxy has drained, and not before MinStopDelay, so that the user
// process is stopped only when nothing can reach it any more: an open
// WebSocket keeps it up until the WebSocket closes or the drain bound
// passes.
const WaitForDrainPath = "/wait-for-drain"

// MinStopDelay is the least time the user process serves on after its pod
// is deleted, while the activator learns that the instance is going and
// still sends it requests.
const MinStopDelay = 5 * time.Second

// The queue-proxy's environment (docs/queue-proxy.md): what the
// controller and the local platform set, and the queue-proxy reads.
const (
	EnvNamespace   = "SLESS_NAMESPACE"
	EnvFunction    = "SLESS_FUNCTION"
	EnvUserPort    = "SLESS_USER_PORT"
	EnvServingPort = "SLESS_SERVING_PORT"
	EnvAdminPort   = "SLESS_ADMIN_PORT"
	EnvConcurrency = "SLESS_CONCURRENCY"
	EnvQueueDepth  = "SLESS_QUEUE_DEPTH"
	EnvTimeout     = "SLESS_TIMEOUT_SECONDS"
	// EnvIdleTimeout and EnvMaxDuration bound a streamed answer: the
	// silence between its bytes, and the request whole.
	EnvIdleTimeout = "SLESS_IDLE_TIMEOUT_SECONDS"
	EnvMaxDuration = "SLESS_MAX_DURATION_SECONDS"
	EnvMaxBody     = "SLESS_MAX_BODY_BYTES"
	EnvDrain       = "SLESS_DRAIN_SECONDS"
	EnvReadTimeout = "SLESS_READ_TIMEOUT_SECONDS"
	// EnvUserProtocol is what the user process speaks: a
	// v1alpha1.Protocol.
	EnvUserProtocol = "SLESS_USER_PROTOCOL"
	// EnvRetryBackoff is the wait before a failed message's first retry.
	EnvRetryBackoff = "SLESS_RETRY_BACKOFF_MS"
	// EnvPodIP is the pod's IP: with the serving port, the instance's
	// address, as the activator knows it, in the records of messages.
	EnvPodIP = "SLESS_POD_IP"
)

// Metadata of the external-push trigger in the ScaledObjects the
// controller writes: KEDA passes it to the autoscaler with every call.
const (
	// KEDAFunction is the Function's name (required).
	KEDAFunction = "function"
	// KEDANamespace is the Function's namespace (optional: the
	// ScaledObject's).
	KEDANamespace = "namespace"
)

// HeaderPrefix begins the name of every header the platform sets: those
// below, which tell a handler how it was called, and the marks its hops
// exchange. Only the platform sets them: the activator removes every
// header of a client's request whose name starts with it, so that a
// handler can believe them (deduplicate on a message's id, trust that a
// cron trigger called it).
const HeaderPrefix = "Sless-"

// Headers an invocation by a trigger other than HTTP carries to the
// function, so that a handler can tell how it was called.
const (
	// TriggerHeader names the trigger in the Function (cron, rabbitmq).
	TriggerHeader = HeaderPrefix + "Trigger"
	// ScheduledTimeHeader is a cron fire's scheduled time (RFC 3339).
	ScheduledTimeHeader = HeaderPrefix + "Scheduled-Time"
	// A message's id, routing key and queue, and how many times it has
	// been delivered to the function, this delivery included (1 the
	// first time). The message's content type is the request's.
	MessageIDHeader     = HeaderPrefix + "Message-Id"
	RoutingKeyHeader    = HeaderPrefix + "Routing-Key"
	QueueHeader         = HeaderPrefix + "Queue"
	DeliveryCountHeader = HeaderPrefix + "Delivery-Count"
	// A run's id, and its attempt's number (1 the first time): the
	// function can tell a run attempted again by its id.
	RunIDHeader      = HeaderPrefix + "Run-Id"
	RunAttemptHeader = HeaderPrefix + "Run-Attempt"
	// A run made by another's end (onSuccess, onFailure): the run that
	// ended, how (succeeded, failed), its function's status when it
	// answered, and why it failed.
	RunParentHeader       = HeaderPrefix + "Run-Parent"
	RunParentStateHeader  = HeaderPrefix + "Run-Parent-State"
	RunParentStatusHeader = HeaderPrefix + "Run-Parent-Status"
	RunParentErrorHeader  = HeaderPrefix + "Run-Parent-Error"
)

// NonRootUID is the user (and group) sless's images run as, and the
// queue-proxy sidecar is told to run as: distroless's "nonroot", by number
// so that a pod's runAsNonRoot can check it without reading /etc/passwd.
const NonRootUID = 65532

// AMQPURLKey is the key of a RabbitMQ trigger's connectionSecret that
// holds the broker's URL, which the queue-proxy, KEDA and the autoscaler
// read.
const AMQPURLKey = "url"

// EnvRabbitMQ holds the function's RabbitMQ triggers, a JSON array of
// RabbitMQTrigger; the queue-proxy consumes each.
const EnvRabbitMQ = "SLESS_RABBITMQ_TRIGGERS"

// RabbitMQTrigger is one RabbitMQ trigger as the queue-proxy consumes it.
// The broker URL is not in it but in the variable URLEnv names
// (AMQPURLEnv), which the controller fills from the trigger's Secret by
// secretKeyRef: a URL holds a password, and must not show in a
// Deployment's spec.
type RabbitMQTrigger struct {
	Name            string `json:"name"`
	Queue           string `json:"queue"`
	URLEnv          string `json:"urlEnv"`
	Prefetch        int    `json:"prefetch"`
	MaxRetries      int    `json:"maxRetries"`
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
	// QueueType is the queue's type; empty is classic.
	QueueType v1alpha1.QueueType `json:"queueType,omitempty"`
}

// AdminAPIHeader marks every answer of the admin port (its value is the
// API's version, AdminAPIVersion), so that a client given another address
// can tell: the invocation port answers every path, /v1/ ones as unknown
// functions, and the CLI would otherwise report that as the API's answer.
const (
	AdminAPIHeader  = "Sless-Admin-Api"
	AdminAPIVersion = "v1"
)

// FirePattern is the activator's admin route that sends a cron fire, which
// the autoscaler's scheduler calls: a POST whose body is the fire's and
// whose ScheduledTimeHeader is its time. It answers 200 with
// {"status": <the invocation's status>}, 404 for an unknown function or
// trigger, 409 for a trigger that is disabled or not a cron trigger.
const FirePattern = "POST /v1/namespaces/{namespace}/functions/{name}/triggers/{trigger}/fire"

// FirePath is FirePattern's path for one trigger.
func FirePath(namespace, name, trigger string) string {
	return "/v1/namespaces/" + namespace + "/functions/" + name + "/triggers/" + trigger + "/fire"
}

// RecordsPattern is the activator's admin route where queue-proxies send
// the invocation records of the messages they consumed: a POST of a JSON
// array of invocation.Record, from an address that is a ready instance of
// the records' function (no token: the address vouches). 204 when kept.
const RecordsPattern = "POST /v1/records"

// RecordsPath is RecordsPattern's path.
const RecordsPath = "/v1/records"

// EnvRecordsURL is where the queue-proxy sends its records: the
// activators' admin API (http://host:port); empty, none are kept.
const EnvRecordsURL = "SLESS_RECORDS_URL"

// ScalingPath is the autoscaler's route (GET, on the port activators push
// to; the leader's) of what it knows of every function that no one
// activator can: a JSON array of Scaling, which the activators' admin API
// shows.
const ScalingPath = "/v1/scaling"

// MaxScalingBytes bounds an answer of ScalingPath a reader takes: some
// 100 bytes a function, for a hundred thousand.
const MaxScalingBytes = 16 << 20

// Scaling is the autoscaler's view of one function.
type Scaling struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Desired is its last decision; Panic is set when that decision was
	// in panic mode.
	Desired int32 `json:"desired"`
	Panic   bool  `json:"panic,omitempty"`
	// Buffered sums the requests waiting at every activator, as they
	// last reported.
	Buffered int `json:"buffered"`
	// QueueDepth sums the messages ready on its queues at their last
	// good reads.
	QueueDepth int64 `json:"queueDepth,omitempty"`
}

// RabbitMQTriggers lists the enabled RabbitMQ triggers of a defaulted
// Function spec as the queue-proxy consumes them, each with the variable
// of its broker URL (AMQPURLEnv): what the controller and the local
// platform write into EnvRabbitMQ.
func RabbitMQTriggers(spec v1alpha1.FunctionSpec) []RabbitMQTrigger {
	var out []RabbitMQTrigger
	for _, t := range spec.Triggers {
		r := t.RabbitMQ
		if r == nil || !t.IsEnabled() {
			continue
		}
		w := RabbitMQTrigger{
			Name: t.Name, Queue: r.Queue, URLEnv: AMQPURLEnv(t.Name), Prefetch: int(r.Prefetch),
			MaxRetries: int(ptr.Deref(r.MaxRetries, 0)), DeadLetterQueue: r.DeadLetterQueue,
		}
		if r.QueueType != v1alpha1.QueueClassic {
			// Classic, the default, is left out: the pods of functions
			// older than queueType keep their spec.
			w.QueueType = r.QueueType
		}
		out = append(out, w)
	}
	return out
}

// AMQPURLEnv is the variable that holds the broker URL of the RabbitMQ
// trigger named trigger (a DNS label): SLESS_AMQP_URL_ORDERS_NEW for
// orders-new.
func AMQPURLEnv(trigger string) string {
	return "SLESS_AMQP_URL_" + strings.ToUpper(strings.ReplaceAll(trigger, "-", "_"))
}
