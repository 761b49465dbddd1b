package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Partitions are by UTC day, named sless_invocations_pYYYYMMDD.
const (
	partitionPrefix = "sless_invocations_p"
	dayLayout       = "20060102"
	// daysAhead are created in advance, so that a record always finds
	// its day's partition, even across a maintenance that failed.
	daysAhead = 2
	// maintenanceLock serializes the partition changes of processes
	// sharing the database (pg_advisory_xact_lock).
	maintenanceLock = int64(0x51e55_7ec0)
)

// maintainEvery runs maintain every period until ctx ends.
func (s *Store) maintainEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if err := s.maintain(ctx, now); err != nil && ctx.Err() == nil {
				s.opts.Log.Warn("invocation records: partition maintenance", "database", s.host, "err", err)
			}
		}
	}
}

// maintain creates the partitions from yesterday to daysAhead, and drops
// those wholly older than the retention, with the default partition's
// rows as old: retention drops tables instead of deleting rows.
func (s *Store) maintain(ctx context.Context, now time.Time) error {
	today := now.UTC().Truncate(24 * time.Hour)
	cutoff := now.Add(-s.opts.Retention)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "select pg_advisory_xact_lock($1)", maintenanceLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		for d := -1; d <= daysAhead; d++ {
			day := today.AddDate(0, 0, d)
			if !day.AddDate(0, 0, 1).After(cutoff) {
				continue // already past the retention
			}
			sql := fmt.Sprintf("create table if not exists %s partition of sless_invocations for values from ('%s') to ('%s')",
				partitionPrefix+day.Format(dayLayout), day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("create the partition of %s: %w", day.Format(time.DateOnly), err)
			}
		}
		old, err := expired(ctx, tx, cutoff)
		if err != nil {
			return err
		}
		for _, name := range old {
			if _, err := tx.Exec(ctx, "drop table if exists "+pgx.Identifier{name}.Sanitize()); err != nil {
				return fmt.Errorf("drop %s: %w", name, err)
			}
		}
		_, err = tx.Exec(ctx, "delete from sless_invocations_default where started_at < $1", cutoff)
		return err
	})
}

// expired lists the day partitions that end before cutoff.
func expired(ctx context.Context, tx pgx.Tx, cutoff time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid
		where i.inhparent = 'sless_invocations'::regclass`)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	var old []string
	for _, name := range names {
		day, err := time.Parse(dayLayout, strings.TrimPrefix(name, partitionPrefix))
		if err != nil || !strings.HasPrefix(name, partitionPrefix) {
			continue // the default partition, or not ours
		}
		if !day.AddDate(0, 0, 1).After(cutoff) {
			old = append(old, name)
		}
	}
	return old, nil
}
