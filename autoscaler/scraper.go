package autoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"sless.dev/sless/internal/wire"
)

// MaxScraped is how many instances one scrape reads at most; above it a
// random sample is read and extrapolated, as Knative does, so the cost of a
// scrape stays flat however many instances a function has.
const MaxScraped = 15

// Observation is a function's load, summed over its instances.
type Observation struct {
	// Concurrency is the sum of the instances' time-weighted average
	// concurrency (requests waiting or in flight) over their last interval.
	Concurrency float64
	// RPS is the sum of the instances' request rates.
	RPS float64
	// Scraped is how many instances answered.
	Scraped int
}

// Scraper reads the queue-proxies' stats (wire.StatsPath).
type Scraper struct {
	Client *http.Client
}

// NewScraper returns a scraper whose reads time out after timeout. It
// keeps a connection to every instance it reads, however many: the
// default transport keeps 100, and at 1,000 instances read each second
// the others were a dial every millisecond. Idle ones close after a
// minute, so removed instances' go.
func NewScraper(timeout time.Duration) *Scraper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost, t.IdleConnTimeout = 0, 1, time.Minute
	return &Scraper{Client: &http.Client{Timeout: timeout, Transport: t}}
}

// Scrape reads the admin addresses (host:port) of a function's instances
// and sums their load, extrapolating from a sample above MaxScraped. An
// instance that does not answer is left out; an error is returned only
// when none answered.
func (s *Scraper) Scrape(ctx context.Context, admins []string) (Observation, error) {
	if len(admins) == 0 {
		return Observation{}, nil
	}
	sample := admins
	if len(admins) > MaxScraped {
		sample = make([]string, MaxScraped)
		for i, j := range rand.Perm(len(admins))[:MaxScraped] {
			sample[i] = admins[j]
		}
	}
	var (
		mu   sync.Mutex
		obs  Observation
		errs []error
		wg   sync.WaitGroup
	)
	for _, addr := range sample {
		wg.Go(func() {
			st, err := s.read(ctx, addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			obs.Concurrency += st.AverageConcurrency
			if st.IntervalSeconds > 0 {
				obs.RPS += float64(st.Requests) / st.IntervalSeconds
			}
			obs.Scraped++
		})
	}
	wg.Wait()
	if obs.Scraped == 0 {
		return obs, fmt.Errorf("no instance answered: %w", errors.Join(errs...))
	}
	scale := float64(len(admins)) / float64(obs.Scraped)
	obs.Concurrency *= scale
	obs.RPS *= scale
	return obs, nil
}

func (s *Scraper) read(ctx context.Context, addr string) (wire.Stats, error) {
	var st wire.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+wire.StatsPath, nil)
	if err != nil {
		return st, err
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s%s: %s", addr, wire.StatsPath, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("%s%s: %w", addr, wire.StatsPath, err)
	}
	// The rest (a newline) read, the connection is kept for the next.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 512))
	return st, nil
}
