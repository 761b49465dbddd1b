package autoscaler_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/queueproxy/queueproxytest"
)

func TestMain(m *testing.M) {
	testfn.RunIfChild()
	os.Exit(m.Run())
}

// TestScraperSumsRealQueueProxies holds requests in flight on two real
// instances and reads their load through /stats.
func TestScraperSumsRealQueueProxies(t *testing.T) {
	one, two := queueproxytest.Start(t), queueproxytest.Start(t)
	s := autoscaler.NewScraper(time.Second)
	ctx := context.Background()
	if _, err := s.Scrape(ctx, []string{one.AdminAddr, two.AdminAddr}); err != nil { // start fresh intervals
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	hold := func(addr string, n int) {
		for range n {
			wg.Go(func() {
				resp, err := http.Get("http://" + addr + "/block?id=scrape")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	hold(one.Addr, 3)
	hold(two.Addr, 2)
	// Wait until the five are in flight, by what the instances report; if
	// they never are, the check below reports the last observation.
	var obs autoscaler.Observation
	eventually.Holds(eventually.Within, func() bool {
		time.Sleep(100 * time.Millisecond) // an interval long enough to average over
		var err error
		if obs, err = s.Scrape(ctx, []string{one.AdminAddr, two.AdminAddr}); err != nil {
			t.Fatal(err)
		}
		return obs.Concurrency > 4.99
	})
	if obs.Scraped != 2 || obs.Concurrency < 4.99 || obs.Concurrency > 5.01 {
		t.Errorf("observation %+v, want 5 requests in flight from 2 instances", obs)
	}
	for _, in := range []*queueproxytest.Instance{one, two} {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(in.Function.Port) + "/release?id=scrape")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	wg.Wait()

	// One instance gone: the other still counts; none left: an error.
	one.Stop()
	if obs, err := s.Scrape(ctx, []string{one.AdminAddr, two.AdminAddr}); err != nil || obs.Scraped != 1 {
		t.Errorf("with one instance down: %+v, %v; want one scraped", obs, err)
	}
	if _, err := s.Scrape(ctx, []string{one.AdminAddr}); err == nil {
		t.Error("scraping only a dead instance succeeded")
	}
}

// TestScraperSamplesAndExtrapolates: above MaxScraped instances only a
// sample is read, and the sum is scaled up to all of them. The instances
// here are plain HTTP servers answering fixed /stats: the arithmetic is
// under test, not the queue-proxy.
func TestScraperSamplesAndExtrapolates(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	var admins []string
	for range 30 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			reads++
			mu.Unlock()
			_, _ = io.WriteString(w, `{"averageConcurrency":2,"requests":10,"intervalSeconds":2}`)
		}))
		t.Cleanup(srv.Close)
		admins = append(admins, strings.TrimPrefix(srv.URL, "http://"))
	}
	obs, err := autoscaler.NewScraper(time.Second).Scrape(context.Background(), admins)
	if err != nil {
		t.Fatal(err)
	}
	if reads != autoscaler.MaxScraped || obs.Scraped != autoscaler.MaxScraped {
		t.Errorf("read %d instances (%d answered), want %d", reads, obs.Scraped, autoscaler.MaxScraped)
	}
	if obs.Concurrency != 60 || obs.RPS != 150 {
		t.Errorf("observation %+v, want concurrency 60 and 150 rps extrapolated to 30 instances", obs)
	}
}

// One scraper reading many instances each second keeps one connection to
// each: at 1,000 instances a redial per read was a dial a millisecond.
func TestScraperKeepsConnections(t *testing.T) {
	const instances = 150 // more than the default transport keeps idle
	var dials sync.Map    // addr → *atomic count of new connections
	admins := make([]string, instances)
	for i := range admins {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"averageConcurrency":1,"requests":2,"intervalSeconds":1}` + "\n"))
		}))
		var n int64
		var mu sync.Mutex
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}
		srv.Start()
		t.Cleanup(srv.Close)
		admins[i] = strings.TrimPrefix(srv.URL, "http://")
		dials.Store(admins[i], func() int64 { mu.Lock(); defer mu.Unlock(); return n })
	}
	s := autoscaler.NewScraper(time.Second)
	for range 3 {
		for _, a := range admins {
			if obs, err := s.Scrape(t.Context(), []string{a}); err != nil || obs.Scraped != 1 {
				t.Fatalf("Scrape %s = %+v, %v", a, obs, err)
			}
		}
	}
	for _, a := range admins {
		count, _ := dials.Load(a)
		if n := count.(func() int64)(); n != 1 {
			t.Errorf("%s: %d connections over three reads, want one", a, n)
		}
	}
}
