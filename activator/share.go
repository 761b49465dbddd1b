package activator

// Peers are the activators in front of the same instances, and which of
// them this one is: Self is its index among them, in the order of their
// addresses, or -1 while it is not among them (not ready yet).
type Peers struct {
	N, Self int
}

// known reports whether the instances are shared: more than one activator,
// and this one's place among them known.
func (p Peers) known() bool { return p.N > 1 && p.Self >= 0 && p.Self < p.N }

// share is this activator's part of a function's k instances (sorted by
// address), so that all activators together admit no more than
// concurrency requests on each: it sends to the instances whose index j
// has j % step == first, and admits capacity requests at once on each.
//
// With at least as many instances as activators, each activator takes its
// own slice of them, whole: instance j is activator j mod N's. With fewer,
// each instance is shared by the activators a with a mod k == j, which
// split its concurrency between them, the remainder to the first; an
// activator always has at least one slot, so below one request each the
// instance may take more than its concurrency (its queue-proxy still holds
// the limit at the user process). Unlimited functions, a single activator
// or one whose place is unknown take every instance at full capacity.
func share(concurrency, k int, p Peers) (first, step, capacity int) {
	if concurrency == 0 || k == 0 || !p.known() {
		return 0, 1, concurrency
	}
	if k >= p.N {
		return p.Self, p.N, concurrency
	}
	mine := p.Self % k
	sharers := p.N / k
	if mine < p.N%k {
		sharers++
	}
	rank := p.Self / k // among the sharers of instance mine
	capacity = concurrency / sharers
	if rank < concurrency%sharers {
		capacity++
	}
	return mine, k, max(capacity, 1)
}
