package activator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"

	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/invocation"
)

// Limits of one batch of records a queue-proxy sends.
const (
	MaxRecordBatch      = 1000
	maxRecordBatchBytes = 4 << 20
)

// ErrNotInstance refuses records from an address that is not a ready
// instance of the function they are of.
var ErrNotInstance = errors.New("not a ready instance of the function")

// AddRecords keeps the records of the messages a queue-proxy consumed (on
// Kubernetes they have no store of their own, so that database
// connections do not grow with instances). The sender is vouched for by
// its address: each record must be of a function one of whose ready
// instances is at host, and of a trigger the queue-proxy runs (rabbitmq).
// Either all records are kept or none.
func (a *Activator) AddRecords(host string, records []invocation.Record) error {
	for i, r := range records {
		rt := a.routes.get(r.Namespace, r.Function)
		switch {
		case r.Trigger != "rabbitmq":
			return fmt.Errorf("record %d: trigger %q: queue-proxies send rabbitmq records only", i, r.Trigger)
		case rt == nil:
			return fmt.Errorf("record %d: %s/%s: unknown function", i, r.Namespace, r.Function)
		case !rt.throttler.HasHost(host):
			return fmt.Errorf("record %d: %s of %s/%s: %w", i, host, r.Namespace, r.Function, ErrNotInstance)
		}
	}
	for _, r := range records {
		r.ID = 0 // the store numbers it
		r.Error = invocation.TruncateError(r.Error)
		a.sink.Add(r)
	}
	return nil
}

// addRecords is the admin route queue-proxies send records to
// (wire.RecordsPattern).
func (s *AdminServer) addRecords(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "no client address")
		return
	}
	var records []invocation.Record
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRecordBatchBytes))
	if err := dec.Decode(&records); err != nil {
		httpjson.Error(w, http.StatusBadRequest, "not a JSON array of records: "+err.Error())
		return
	}
	if len(records) > MaxRecordBatch {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("at most %d records a batch", MaxRecordBatch))
		return
	}
	if err := s.Activator.AddRecords(host, records); err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, ErrNotInstance) {
			code = http.StatusForbidden
		}
		httpjson.Error(w, code, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
