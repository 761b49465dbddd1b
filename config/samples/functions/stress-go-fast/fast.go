// Package fast answers the factorial and the Fibonacci number of ?n=
// (default 20, at most 5000) in exact big integers: a quick, CPU-light Go
// function to measure the platform's own overhead under load. A Go handler
// answers an error as 500, so a bad ?n= is a 500 with {"error": ...}.
package fast

import (
	"context"
	"fmt"
	"math/big"
	"strconv"

	"sless.dev/sless/runtimes/go/sless"
)

// maxN keeps one call in the millisecond range: 5000! has 16326 digits.
const maxN = 5000

// Handle answers {"n": n, "factorial": "n!", "fibonacci": "F(n)"}, the
// numbers as decimal strings since they outgrow JSON numbers.
func Handle(ctx context.Context, e sless.Event) (any, error) {
	raw, ok := e.Query["n"]
	if !ok {
		raw = "20"
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > maxN {
		return nil, fmt.Errorf("n must be an integer between 0 and %d, not %q", maxN, raw)
	}
	return map[string]any{"n": n, "factorial": factorial(n).String(), "fibonacci": fibonacci(n).String()}, nil
}

func factorial(n int) *big.Int {
	return new(big.Int).MulRange(1, int64(n)) // the empty product is 1, so 0! = 1
}

func fibonacci(n int) *big.Int {
	a, b := big.NewInt(0), big.NewInt(1)
	for range n {
		a.Add(a, b)
		a, b = b, a
	}
	return a
}
