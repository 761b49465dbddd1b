// Package wire holds the contract the components share across process
// boundaries: the labels the controller puts on a function's objects and
// the watchers select by, the ports of a function's pod, the queue-proxy's
// environment, and the metadata of the external-push trigger KEDA sends
// the autoscaler. Each is defined here once, so that the writer and the
// readers cannot drift; users, dashboards and scripts depend on them too.
package wire

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
	EnvMaxBody     = "SLESS_MAX_BODY_BYTES"
	EnvDrain       = "SLESS_DRAIN_SECONDS"
	EnvReadTimeout = "SLESS_READ_TIMEOUT_SECONDS"
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
