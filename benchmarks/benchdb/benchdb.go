// Package benchdb gives a benchmark a PostgreSQL database of its own on
// the local server, dropped when it is done, so that each measurement
// starts from an empty schema.
package benchdb

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultServer is the local server's admin URL.
const DefaultServer = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// With runs f on a new database of server, dropped afterwards.
func With[T any](ctx context.Context, server string, f func(url string) (T, error)) (T, error) {
	var zero T
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return zero, err
	}
	defer admin.Close(ctx)
	name := "sless_bench_" + strings.ToLower(rand.Text()[:10])
	if _, err := admin.Exec(ctx, "create database "+name); err != nil {
		return zero, err
	}
	defer admin.Exec(ctx, "drop database "+name+" with (force)") //nolint:errcheck
	cfg, _ := pgx.ParseConfig(server)
	return f(fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name))
}
