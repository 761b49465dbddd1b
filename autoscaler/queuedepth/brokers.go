package queuedepth

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// urlTTL is how long a broker's URL is used before it is resolved again,
// so that a Secret's change is seen without a read of it each second.
const urlTTL = 30 * time.Second

// Brokers reads queues on several brokers, a Reader each, by broker name:
// on Kubernetes a trigger's Secret, namespace/name, which resolve turns
// into its URL. Readers are shared by the brokers of the same URL.
type Brokers struct {
	resolve func(ctx context.Context, broker string) (string, error)
	log     *slog.Logger

	mu      sync.Mutex
	urls    map[string]resolved // by broker
	readers map[string]*Reader  // by URL
	closed  bool
}

type resolved struct {
	url string
	at  time.Time
}

// NewBrokers returns readers of the brokers resolve names.
func NewBrokers(resolve func(ctx context.Context, broker string) (string, error), log *slog.Logger) *Brokers {
	return &Brokers{resolve: resolve, log: log, urls: map[string]resolved{}, readers: map[string]*Reader{}}
}

// OneBroker is a resolve of every broker name to url, as sless dev has.
func OneBroker(url string) func(context.Context, string) (string, error) {
	return func(context.Context, string) (string, error) { return url, nil }
}

// reader returns the Reader of broker.
func (b *Brokers) reader(ctx context.Context, broker string) (*Reader, error) {
	b.mu.Lock()
	r, known := b.urls[broker]
	b.mu.Unlock()
	if !known || time.Since(r.at) > urlTTL {
		url, err := b.resolve(ctx, broker)
		if err != nil {
			return nil, fmt.Errorf("broker %s: %w", broker, err)
		}
		r = resolved{url: url, at: time.Now()}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	b.urls[broker] = r
	rd := b.readers[r.url]
	if rd == nil {
		rd = New(r.url, b.log)
		b.readers[r.url] = rd
	}
	return rd, nil
}

// Depth reads a queue's ready messages on broker.
func (b *Brokers) Depth(ctx context.Context, broker, queue string) (int64, error) {
	r, err := b.reader(ctx, broker)
	if err != nil {
		return 0, err
	}
	return r.Depth(ctx, queue)
}

// WaitMessage waits for a message on one of queues of broker (see
// Reader.WaitMessage).
func (b *Brokers) WaitMessage(ctx context.Context, broker string, queues []string) error {
	r, err := b.reader(ctx, broker)
	if err != nil {
		return err
	}
	return r.WaitMessage(ctx, queues)
}

// Close closes every reader.
func (b *Brokers) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	var errs []error
	for _, r := range b.readers {
		if err := r.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("close brokers: %v", errs)
	}
	return nil
}
