// Command bench-console measures the web console with many functions: how
// long the functions page takes to show them all in headless Chromium,
// against the floor of the same browser fetching and parsing the API's
// list alone; and what the page's live updates cost sless dev, as its CPU
// with the page open less its CPU idle, over the same time.
//
//	go run ./benchmarks/cmd/bench-console -sless bin/sless
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/chromedp/chromedp"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/benchmarks/devharness"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/internal/browsertest"
)

type config struct {
	sless     string
	functions int
	rounds    int
	live      time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.sless, "sless", "bin/sless", "the sless binary")
	flag.IntVar(&c.functions, "functions", 1000, "functions served, all idle")
	flag.IntVar(&c.rounds, "rounds", 5, "page loads measured")
	flag.DurationVar(&c.live, "live", 10*time.Second, "each turn of the live cost's measure, idle and with the page open")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-console:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	bin, err := browsertest.Binary()
	if err != nil {
		return fmt.Errorf("chromium: %w", err)
	}
	dev, err := devharness.Start("bench-console", c.sless, devharness.Options{Functions: functions(c.functions),
		Files: map[string]string{"fn/main.py": "def handle(e):\n    return 'hi'\n"}})
	if err != nil {
		return err
	}
	defer dev.Stop()
	admin := dev.Admin
	fmt.Fprintf(os.Stderr, "waiting for %d functions...\n", c.functions)
	if err := dev.Wait(ctx, 5*time.Minute, devharness.Idle); err != nil {
		return err
	}

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, browsertest.Options(bin, filepath.Join(dev.Dir(), "chromium"))...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()

	var render, floor []time.Duration
	for range c.rounds {
		// A load may lose its page to a late navigation event (the
		// protocol's "Cannot find context"): it is loaded again.
		var r, f time.Duration
		for try := 1; ; try++ {
			if r, f, err = loadOnce(tab, admin, c.functions); err == nil || try == 3 {
				break
			}
			fmt.Fprintln(os.Stderr, "load again:", err)
		}
		if err != nil {
			return err
		}
		render, floor = append(render, r), append(floor, f)
	}

	// The live cost: sless dev's CPU with no page open, then with the
	// functions page open and updating, in turns, c.rounds times: the
	// platform's own idle work (reading the manifests twice a second)
	// varies, so one pair would not tell the page's share from it.
	var idle, open []time.Duration
	for range c.rounds {
		for _, page := range []string{"about:blank", "http://" + admin + "/ui/#/"} {
			if err := chromedp.Do(tab, chromedp.Navigate(page)); err != nil {
				return err
			}
			cpu, err := cpuOver(ctx, dev.Pid(), c.live)
			if err != nil {
				return err
			}
			if page == "about:blank" {
				idle = append(idle, cpu)
			} else {
				open = append(open, cpu)
			}
		}
	}
	report(c, render, floor, idle, open)
	return nil
}

// loadOnce loads the functions page afresh and returns the time from the
// navigation's start to the last function's row, and the floor: the same
// page's fetch and parse of /v1/functions alone.
func loadOnce(tab context.Context, admin string, n int) (render, floor time.Duration, err error) {
	if err := chromedp.Do(tab, chromedp.Navigate("about:blank"), chromedp.Navigate("http://"+admin+"/ui/#/")); err != nil {
		return 0, 0, err
	}
	ms, err := chromedp.Run(tab, chromedp.Poll[float64](
		fmt.Sprintf(`document.querySelectorAll('#functions tbody tr').length >= %d && performance.now()`, n),
		chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(time.Minute)))
	if err != nil {
		return 0, 0, fmt.Errorf("the page's %d rows: %w", n, err)
	}
	floorMs, err := chromedp.Run(tab, chromedp.Evaluate[float64](`(async () => {
		const t = performance.now();
		await (await fetch('/v1/functions')).json();
		return performance.now() - t;
	})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		return 0, 0, fmt.Errorf("the floor: %w", err)
	}
	return msDuration(ms), msDuration(floorMs), nil
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// cpuOver is the CPU pid used over d.
func cpuOver(ctx context.Context, pid int, d time.Duration) (time.Duration, error) {
	before, err := hops.CPUTime(pid)
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	after, err := hops.CPUTime(pid)
	return after - before, err
}

func report(c config, render, floor, idle, open []time.Duration) {
	med := func(ds []time.Duration) time.Duration {
		ds = slices.Sorted(slices.Values(ds))
		return ds[len(ds)/2]
	}
	slices.Sort(render)
	slices.Sort(floor)
	fmt.Printf("| %d functions | median of %d | min | max |\n|---|---|---|---|\n", c.functions, c.rounds)
	fmt.Printf("| functions page, navigation to the last row | %v | %v | %v |\n", ms(med(render)), ms(render[0]), ms(render[len(render)-1]))
	fmt.Printf("| floor: fetch and parse of /v1/functions in the page | %v | %v | %v |\n", ms(med(floor)), ms(floor[0]), ms(floor[len(floor)-1]))
	fmt.Printf("\nrender / floor: %.1fx\n\n", float64(med(render))/float64(med(floor)))
	share := func(cpu time.Duration) float64 { return 100 * cpu.Seconds() / c.live.Seconds() }
	fmt.Printf("| sless dev's CPU, median of %d turns of %v | share of one core |\n|---|---|\n", c.rounds, c.live)
	fmt.Printf("| idle, no page open | %.2f%% |\n", share(med(idle)))
	fmt.Printf("| the functions page open, updating every second | %.2f%% |\n", share(med(open)))
	fmt.Printf("| the page's live updates (the difference) | %.2f%% |\n", share(med(open)-med(idle)))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }

// functions are n idle Python functions sharing one source, in ten
// namespaces.
func functions(n int) []devharness.Manifest {
	fns := make([]devharness.Manifest, n)
	for i := range fns {
		fns[i] = devharness.Manifest{Namespace: fmt.Sprintf("ns-%d", i%10), Name: fmt.Sprintf("f-%04d", i),
			Runtime: v1alpha1.RuntimePython, Source: "./fn", Scale: "{min: 0, initial: 0}"}
	}
	return fns
}
