// Package pgtest gives tests a database of their own on the real
// PostgreSQL server (SLESS_TEST_POSTGRES, default 127.0.0.1:5432 as user
// postgres), dropped when the test ends. In CI the server must be there;
// elsewhere a test without it is skipped with the reason.
package pgtest

import (
	"context"
	"crypto/rand"
	"fmt"
	neturl "net/url"
	"os"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/internal/eventually"
)

// ServerURL is the server's admin URL, without a database.
func ServerURL() string {
	if u := os.Getenv("SLESS_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// DB creates an empty database for the test and returns its URL and name.
func DB(t testing.TB) (url, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		needs.Missing(t, "PostgreSQL (%v): set SLESS_TEST_POSTGRES or start it", err)
	}
	defer admin.Close(ctx)
	name = "sless_test_" + rand.Text()[:12]
	if _, err := admin.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() { drop(t, name) })
	u, err := neturl.Parse(ServerURL())
	if err != nil {
		t.Fatalf("SLESS_TEST_POSTGRES: %v", err)
	}
	u.Path = "/" + name
	return u.String(), name
}

func drop(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Errorf("drop database %s: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)"); err != nil {
		t.Errorf("drop database %s: %v", name, err)
	}
}

// SetReachable lets connections to the database in, or keeps them out and
// ends those open: an outage the server itself produces.
func SetReachable(t testing.TB, name string, reachable bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	db := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, fmt.Sprintf("alter database %s allow_connections %t", db, reachable)); err != nil {
		t.Fatal(err)
	}
	if reachable {
		return
	}
	// A connection being made as connections were shut out may still get
	// in: end them until none is left.
	eventually.True(t, "every connection to "+name+" ended", func() bool {
		var left int
		err := admin.QueryRow(ctx, `with ended as (select pg_terminate_backend(pid) from pg_stat_activity where datname = $1)
			select count(*) from ended`, name).Scan(&left)
		if err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
}
