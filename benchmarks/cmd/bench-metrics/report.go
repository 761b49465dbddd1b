package main

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report prints the run in Markdown: the pages' series, the scrapes'
// cost, and with perf where a scrape's own CPU goes.
func report(c config, comp, floorComp composition, results map[string][]batch, cold coldStartRun, devRSS string) {
	fmt.Printf("sless dev with %d functions (Python hello, one ready instance each, one cold start and one 200 each; cold starts took %v, %d at once; sless dev's RSS %s): %s, batches of %d scrapes or %v, %d rounds, idle interval %v, %d CPUs, %s\n\n",
		c.functions, cold.took.Round(time.Second), c.parallel, devRSS, time.Now().UTC().Format(time.DateOnly), c.scrapes, c.maxBatch, c.rounds, c.idle, runtime.NumCPU(), c.sless)
	if len(cold.retried) > 0 {
		fmt.Printf("Functions whose first request failed and were sent it again: %s\n\n", strings.Join(cold.retried, "; "))
	}
	reportSeries(c.functions, comp, floorComp)
	reportScrapes(results)
	if c.usePerf {
		reportPerf(results[perfKey(devTarget)][0], results[perfKey(floorTarget)][0])
	}
}

// reportSeries prints what the pages are made of: the series of each
// kind, and one function's by family.
func reportSeries(n int, comp, floorComp composition) {
	lo, hi := -1, -1
	for _, v := range comp.perFunction {
		if lo < 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	fmt.Println("| series on the page | sless dev | per function | floor |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| sless_, all | %d | %.1f | %d |\n", comp.sless, float64(comp.sless)/float64(n), floorComp.sless)
	fmt.Printf("| sless_ of one function (min–max over the %d functions) | | %d–%d | |\n", len(comp.perFunction), lo, hi)
	fmt.Printf("| sless_ with no function label | %d | | %d |\n", comp.slessNoFunction, floorComp.slessNoFunction)
	var other []string
	for _, k := range slices.Sorted(mapKeys(comp.otherFamilies)) {
		other = append(other, fmt.Sprintf("%s_ %d", k, comp.otherFamilies[k]))
	}
	fmt.Printf("| not sless_ (%s) | %d | | %d |\n", strings.Join(other, ", "), comp.other, floorComp.other)
	fmt.Printf("| all | %d | | %d |\n\n", comp.total, floorComp.total)

	fmt.Println("| family (one function's series) | type | series |")
	fmt.Println("|---|---|---|")
	fams := slices.SortedFunc(mapKeys(comp.families), func(a, b string) int {
		return cmp.Or(cmp.Compare(comp.families[b], comp.families[a]), cmp.Compare(a, b))
	})
	sum := 0
	for _, f := range fams {
		fmt.Printf("| `%s` | %s | %d |\n", f, comp.familyTypes[f], comp.families[f])
		sum += comp.families[f]
	}
	fmt.Printf("| all | | %d |\n\n", sum)
}

// reportScrapes prints the cost of a scrape of each page and encoding
// over the rounds, and each process's CPU while idle.
func reportScrapes(results map[string][]batch) {
	fmt.Println("Per scrape; medians of the rounds (lowest–highest). Process CPU: all of the process's CPU over the batch, divided by its scrapes; idle subtracted: less the process's idle rate measured just before, over the batch's length.")
	fmt.Println()
	fmt.Println("| page, encoding | scrapes a batch | body | process CPU | idle subtracted | wall (mean) | floor: body | floor: process CPU | floor: wall | process CPU / floor's | wall / floor's |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, gz := range []bool{false, true} {
		s, f := results[batchKey(devTarget, gz)], results[batchKey(floorTarget, gz)]
		label := "plain"
		if gz {
			label = "gzip"
		}
		label += fmt.Sprintf(" (%s; %s)", s[0].encoding, s[0].contType)
		var counts []string
		for _, b := range s {
			counts = append(counts, strconv.Itoa(b.scrapes))
		}
		fmt.Printf("| %s | %s (floor %d) | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label, strings.Join(counts, ", "), f[0].scrapes,
			kib(s[len(s)-1].bytes), spread(s, batch.rawCPU), spread(s, batch.netCPU), spread(s, batch.perScrape),
			kib(f[len(f)-1].bytes), spread(f, batch.rawCPU), spread(f, batch.perScrape),
			ratio(s, f, batch.rawCPU), ratio(s, f, batch.perScrape))
	}
	fmt.Println()
	for _, name := range []string{devTarget, floorTarget} {
		var rates []string
		for _, x := range append(results[batchKey(name, false)], results[batchKey(name, true)]...) {
			rates = append(rates, fmt.Sprintf("%.0f%%", 100*float64(x.idleCPU)/float64(x.idle)))
		}
		fmt.Printf("- %s's CPU while idle, before each batch: %s of a core\n", name, strings.Join(rates, ", "))
	}
}

// reportPerf prints a gzipped scrape's own CPU, of sless dev (s) and of
// the floor (f), from the batches perf recorded, and where it goes.
func reportPerf(s, f batch) {
	fmt.Println()
	fmt.Printf("A gzipped scrape's own CPU, from a batch perf recorded (at %d Hz, with call stacks): the process's CPU over the batch times the share of the samples whose stack is a scrape's. (perf slows a busy sless dev down: its wall times here are not the scrape's.)\n", perfRate)
	fmt.Println()
	fmt.Println("| | sless dev | floor | ratio |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| scrapes in the batch | %d | %d | |\n", s.scrapes, f.scrapes)
	fmt.Printf("| samples in the scrapes' stacks / all | %d / %d | %d / %d | |\n", s.attr.scrape, s.attr.samples, f.attr.scrape, f.attr.samples)
	fmt.Printf("| own CPU per scrape | %s | %s | %.1f× |\n", msf(s.ownCPU()), msf(f.ownCPU()), float64(s.ownCPU())/float64(f.ownCPU()))
	fmt.Printf("| process CPU per scrape | %s | %s | |\n", msf(s.rawCPU()), msf(f.rawCPU()))
	fmt.Printf("| wall per scrape, under perf | %s | %s | |\n", msf(s.perScrape()), msf(f.perScrape()))

	fmt.Println()
	fmt.Println("Where a gzipped scrape's own CPU goes, ms per scrape (a sample counts in the first part found on its stack, in this order):")
	fmt.Println()
	fmt.Println("| part | sless dev | floor |")
	fmt.Println("|---|---|---|")
	share := func(b batch, n int) string {
		if b.attr.samples == 0 {
			return "n/a"
		}
		return msf(time.Duration(float64(b.cpu) * float64(n) / float64(b.attr.samples) / float64(b.scrapes)))
	}
	for _, p := range parts {
		fmt.Printf("| %s | %s | %s |\n", p.name, share(s, s.attr.parts[p.name]), share(f, f.attr.parts[p.name]))
	}
	fmt.Printf("| all of the scrapes' stacks | %s | %s |\n", share(s, s.attr.scrape), share(f, f.attr.scrape))
	fmt.Printf("| of which assisting the GC | %s | %s |\n", share(s, s.attr.gcAssist), share(f, f.attr.gcAssist))
	fmt.Printf("| not counted above: the background GC workers over the batch (the scrapes' garbage and the rest) | %s | %s |\n",
		share(s, s.attr.gcMark), share(f, f.attr.gcMark))
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func kib(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

// spread is the median over the rounds of f, in ms, with the range.
func spread(bs []batch, f func(batch) time.Duration) string {
	vals := make([]time.Duration, len(bs))
	for i, b := range bs {
		vals[i] = f(b)
	}
	slices.Sort(vals)
	s := msf(vals[len(vals)/2])
	if len(vals) > 1 {
		s += fmt.Sprintf(" (%s–%s)", msf(vals[0]), msf(vals[len(vals)-1]))
	}
	return s
}

// ratio is the median over the rounds of f(a) / f(b) of the same round.
func ratio(a, b []batch, f func(batch) time.Duration) string {
	vals := make([]float64, len(a))
	for i := range a {
		vals[i] = float64(f(a[i])) / float64(f(b[i]))
	}
	slices.Sort(vals)
	s := fmt.Sprintf("%.1f×", vals[len(vals)/2])
	if len(vals) > 1 {
		s += fmt.Sprintf(" (%.1f–%.1f)", vals[0], vals[len(vals)-1])
	}
	return s
}

func msf(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
