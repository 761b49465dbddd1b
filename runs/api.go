package runs

// The runs API on an activator's invocation port, as the activator serves
// it and its clients (the CLI, the FunctionRun controller) call it.
const (
	// Path begins the paths of the runs API: Path+"{id}" and
	// Path+"{id}/result". It is not a function's path: a function routed
	// by host keeps its own /runs/.
	Path = "/runs/"
	// PreferAsync is the preference (RFC 7240) that makes a request to a
	// function a run: "Prefer: respond-async".
	PreferAsync = "respond-async"
	// IdempotencyKeyHeader names a submission's key: the same key and
	// request answer the first run.
	IdempotencyKeyHeader = "Idempotency-Key"
	// MaxIdempotencyKey bounds an Idempotency-Key, in bytes.
	MaxIdempotencyKey = 255
)

// Accepted is the body of a submission's 202: the run, and where to read
// it (its Location).
type Accepted struct {
	ID       ID     `json:"id"`
	State    State  `json:"state"`
	Location string `json:"location"`
}
