package wire

// StatsPath is the queue-proxy's admin route (GET) that the autoscaler
// scrapes every second: a JSON Stats. Each read closes the interval it
// reports and starts the next.
const StatsPath = "/stats"

// Stats is one instance's load over the interval since the previous read
// of StatsPath, as the queue-proxy measures it.
type Stats struct {
	// AverageConcurrency is Σ(concurrency × dt) / Σdt over the interval:
	// the requests in the queue-proxy, waiting or at the user process, so
	// that demand above capacity shows.
	AverageConcurrency float64 `json:"averageConcurrency"`
	// Requests is the number of requests that arrived in the interval.
	Requests int64 `json:"requests"`
	// IntervalSeconds is the length of the interval.
	IntervalSeconds float64 `json:"intervalSeconds"`
	// InFlight and Queued are the counts at the time of the read.
	InFlight int64 `json:"inFlight"`
	Queued   int64 `json:"queued"`
}

// PokePath is the autoscaler's route (POST, on the port activators push
// to) where an activator asks for an instance the moment a request waits
// for a function that has none: a JSON Poke, sent at once rather than
// with the next buffered report, as it is the wake-up of a cold start.
// 204 when taken, 404 for a function the autoscaler does not scale.
const PokePath = "/v1/poke"

// Poke names the function a request waits for.
type Poke struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// BufferedPath is the autoscaler's route (POST, on the port activators
// push to) where each activator reports, once an interval (a second), the
// requests waiting in it: a JSON BufferedReport carrying every function
// with requests waiting, and each function once more with 0 when its
// requests are gone. The autoscaler adds up the counts of several
// activators, each count expiring when its activator stops renewing it.
// 204 when taken; 404 naming the functions it does not scale (the others'
// counts are taken); 400 for a negative count, 413 for more than
// MaxBufferedBatch functions.
const BufferedPath = "/v1/buffered"

// BufferedReport is one activator's report of its waiting requests.
type BufferedReport struct {
	// Activator names the reporting activator (its pod): counts of
	// the same function from several activators add up.
	Activator string `json:"activator"`
	// Functions holds one count per function, each at most once.
	Functions []BufferedCount `json:"functions"`
}

// BufferedCount is how many of a function's requests wait in an
// activator.
type BufferedCount struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Count     int    `json:"count"`
}

// MaxBufferedBatch bounds the functions of one BufferedReport; an
// activator with more sends several. At some 170 bytes a count at most
// (names of 63 characters), a report stays under MaxBufferedBytes.
const MaxBufferedBatch = 4096

// MaxBufferedBytes bounds the body of a BufferedReport the autoscaler
// reads.
const MaxBufferedBytes = 1 << 20
