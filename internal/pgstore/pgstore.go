// Package pgstore is what sless's PostgreSQL stores share: a pool opened
// from a URL (whose password no error quotes), a schema migrated under an
// advisory lock, and tables partitioned by day, whose retention drops
// whole days instead of deleting rows.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

// connectTimeout bounds a connection's setup when the URL sets none: a
// host that does not answer is an outage, not a hang.
const connectTimeout = 5 * time.Second

// Open returns a pool of at most maxConns connections to the database at
// url, named app in pg_stat_activity, and the database's name for errors
// and logs (host:port/database). It connects lazily: a database that is
// down is an error of the first query.
func Open(ctx context.Context, url, app string, maxConns int32) (*pgxpool.Pool, string, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// Not err: pgx's message quotes the URL, password and all, when
		// it cannot tell where the password is.
		return nil, "", errors.New("database URL: not a PostgreSQL URL or connection string")
	}
	cfg.MaxConns = maxConns
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	name := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("database %s: %w", name, err)
	}
	return pool, name, nil
}

// Migrate brings the schema to the latest of migrations (tern's numbered
// SQL files), recording its version in versionTable. tern holds an
// advisory lock meanwhile, so that processes starting at once take turns,
// and the later ones find nothing to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool, migrations fs.FS, versionTable string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	m, err := migrate.NewMigrator(ctx, conn.Conn(), versionTable)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if err := m.LoadMigrations(migrations); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Daily is a table partitioned by range of a timestamp column, one
// partition a UTC day named <Table>_pYYYYMMDD, and a default partition
// that catches rows far from now.
type Daily struct {
	Table, Column string
	// Lock is the advisory lock that serializes the partition changes of
	// the processes sharing the database.
	Lock int64
}

// DaysAhead are created in advance, so that a row always finds its day's
// partition, even across a maintenance that failed.
const DaysAhead = 2

const dayLayout = "20060102"

// Partition is the name of day's partition.
func (d Daily) Partition(day time.Time) string {
	return d.Table + "_p" + day.UTC().Format(dayLayout)
}

// Maintain creates the partitions from yesterday to DaysAhead, and drops
// those wholly older than the retention, with the default partition's
// rows as old.
func (d Daily) Maintain(ctx context.Context, pool *pgxpool.Pool, now time.Time, retention time.Duration) error {
	today := now.UTC().Truncate(24 * time.Hour)
	cutoff := now.Add(-retention)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "select pg_advisory_xact_lock($1)", d.Lock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		for n := -1; n <= DaysAhead; n++ {
			day := today.AddDate(0, 0, n)
			if !day.AddDate(0, 0, 1).After(cutoff) {
				continue // already past the retention
			}
			sql := fmt.Sprintf("create table if not exists %s partition of %s for values from ('%s') to ('%s')",
				pgx.Identifier{d.Partition(day)}.Sanitize(), pgx.Identifier{d.Table}.Sanitize(),
				day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("create the partition of %s: %w", day.Format(time.DateOnly), err)
			}
		}
		old, err := d.expired(ctx, tx, cutoff)
		if err != nil {
			return err
		}
		for _, name := range old {
			if _, err := tx.Exec(ctx, "drop table if exists "+pgx.Identifier{name}.Sanitize()); err != nil {
				return fmt.Errorf("drop %s: %w", name, err)
			}
		}
		_, err = tx.Exec(ctx, fmt.Sprintf("delete from %s where %s < $1",
			pgx.Identifier{d.Table + "_default"}.Sanitize(), pgx.Identifier{d.Column}.Sanitize()), cutoff)
		return err
	})
}

// Partitions lists the table's partitions by name, for tests and tools.
func (d Daily) Partitions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]string, error) {
	rows, err := q.Query(ctx, `select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid
		where i.inhparent = $1::regclass order by 1`, d.Table)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return names, nil
}

// expired lists the day partitions that end before cutoff.
func (d Daily) expired(ctx context.Context, tx pgx.Tx, cutoff time.Time) ([]string, error) {
	names, err := d.Partitions(ctx, tx)
	if err != nil {
		return nil, err
	}
	var old []string
	prefix := d.Table + "_p"
	for _, name := range names {
		day, err := time.Parse(dayLayout, strings.TrimPrefix(name, prefix))
		if err != nil || !strings.HasPrefix(name, prefix) {
			continue // the default partition, or not ours
		}
		if !day.AddDate(0, 0, 1).After(cutoff) {
			old = append(old, name)
		}
	}
	return old, nil
}

// Every runs maintain every period until ctx ends, passing it the time;
// warn takes its errors.
func Every(ctx context.Context, period time.Duration, maintain func(now time.Time) error, warn func(error)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if err := maintain(now); err != nil && ctx.Err() == nil {
				warn(err)
			}
		}
	}
}
