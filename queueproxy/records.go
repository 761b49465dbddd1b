package queueproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
)

const (
	// maxPendingRecords bounds the records waiting to be sent; beyond,
	// they are dropped and counted: the consumer never waits on them.
	maxPendingRecords = 10_000
	// recordBatch is the most records one POST carries.
	recordBatch = 500
	// recordFlush is the longest a record waits for its batch.
	recordFlush = time.Second
	// recordAttempts bounds the sends of a batch the activators refused
	// because they did not know this instance yet: a new instance is
	// ready here before the activators learn of it from its
	// EndpointSlice. Other failures are not retried.
	recordAttempts = 10
)

// recordSender sends the consumer's invocation records to the activators'
// admin API in batches (wire.RecordsPattern), where their store is, so
// that database connections do not grow with instances.
type recordSender struct {
	url     string
	client  *http.Client
	log     *slog.Logger
	in      chan invocation.Record
	sent    prometheus.Counter
	dropped prometheus.Counter
}

func newRecordSender(url string, reg prometheus.Registerer, labels prometheus.Labels, log *slog.Logger) (*recordSender, error) {
	s := &recordSender{url: strings.TrimSuffix(url, "/") + wire.RecordsPath, client: &http.Client{Timeout: 10 * time.Second},
		log: log, in: make(chan invocation.Record, maxPendingRecords),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_queueproxy_records_sent_total",
			Help: "Invocation records of consumed messages sent to the activators.", ConstLabels: labels}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_queueproxy_records_dropped_total",
			Help: "Invocation records of consumed messages dropped: too many waiting, or refused or lost by the activators.", ConstLabels: labels})}
	for _, c := range []prometheus.Collector{s.sent, s.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Add queues a record to send; it never blocks.
func (s *recordSender) Add(r invocation.Record) {
	select {
	case s.in <- r:
	default:
		s.dropped.Inc()
	}
}

// run sends batches until ctx ends, then what is left.
func (s *recordSender) run(ctx context.Context) {
	tick := time.NewTicker(recordFlush)
	defer tick.Stop()
	b := &batcher{s: s, records: make([]invocation.Record, 0, recordBatch)}
	for {
		in := s.in
		if len(b.records) >= recordBatch {
			in = nil // a kept batch is full: the tick sends it again
		}
		select {
		case r := <-in:
			if b.records = append(b.records, r); len(b.records) == recordBatch && b.attempts == 0 {
				b.flush(true)
			}
		case <-tick.C:
			b.flush(true)
		case <-ctx.Done():
			for {
				select {
				case r := <-s.in:
					if b.records = append(b.records, r); len(b.records) == recordBatch {
						b.flush(false)
					}
				default:
					b.flush(false)
					return
				}
			}
		}
	}
}

// batcher is the batch run is filling, and how its sends went.
type batcher struct {
	s        *recordSender
	records  []invocation.Record
	attempts int  // refusals of this batch, errNotKnown
	failing  bool // the last send failed: logged once, not for each batch
}

// flush sends the batch. A batch the activators refused as not knowing the
// instance is kept to send again, when retry allows and attempts remain;
// otherwise it is counted sent or dropped.
func (b *batcher) flush(retry bool) {
	if len(b.records) == 0 {
		return
	}
	err := b.s.send(b.records)
	if retry && errors.Is(err, errNotKnown) && b.attempts < recordAttempts-1 {
		b.attempts++ // sent again, with what joins it, at the next flush
		return
	}
	switch {
	case err != nil && !b.failing:
		b.s.log.Warn("invocation records not sent, dropped", "records", len(b.records), "err", err)
	case err == nil && b.failing:
		b.s.log.Info("invocation records sent again")
	}
	b.failing = err != nil
	if err != nil {
		b.s.dropped.Add(float64(len(b.records)))
	} else {
		b.s.sent.Add(float64(len(b.records)))
	}
	b.records, b.attempts = b.records[:0], 0
}

// errNotKnown is the activators' refusal of records from an instance they
// do not know (yet).
var errNotKnown = errors.New("the activators do not know this instance yet")

func (s *recordSender) send(batch []invocation.Record) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	resp, err := s.client.Post(s.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		var answer struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&answer)
		err := fmt.Errorf("%s: %s: %s", s.url, resp.Status, answer.Error)
		if resp.StatusCode == http.StatusForbidden {
			err = fmt.Errorf("%w: %w", errNotKnown, err)
		}
		return err
	}
	return nil
}
