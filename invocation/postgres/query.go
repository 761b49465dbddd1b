package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/invocation"
)

// List answers q from the table: newest first by (started_at, id), on the
// one index, with the cursor as a keyset so that no page is an OFFSET.
func (s *Store) List(ctx context.Context, q invocation.Query) (invocation.Page, error) {
	if err := q.Check(); err != nil {
		return invocation.Page{}, err
	}
	var where strings.Builder
	args := []any{q.Namespace, q.Function}
	where.WriteString("namespace = $1 and function = $2")
	arg := func(cond string, v any) {
		args = append(args, v)
		fmt.Fprintf(&where, " and "+cond, len(args))
	}
	if q.Before != nil {
		args = append(args, q.Before.Start)
		arg("(started_at, id) < ($"+strconv.Itoa(len(args))+", $%d)", q.Before.ID)
	}
	if !q.Since.IsZero() {
		arg("started_at >= $%d", q.Since)
	}
	if q.Status != 0 {
		arg("status = $%d", q.Status)
	}
	if q.Trigger != "" {
		arg("trigger = $%d", q.Trigger)
	}
	args = append(args, q.Limit+1)
	sql := "select id, " + strings.Join(columns, ", ") + " from sless_invocations where " + where.String() +
		" order by started_at desc, id desc limit $" + strconv.Itoa(len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return invocation.Page{}, fmt.Errorf("invocations of %s/%s: %w", q.Namespace, q.Function, err)
	}
	records, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return invocation.Page{}, fmt.Errorf("invocations of %s/%s: %w", q.Namespace, q.Function, err)
	}
	return invocation.PageOf(records, q.Limit), nil
}

func scanRecord(row pgx.CollectableRow) (invocation.Record, error) {
	var r invocation.Record
	var status int16
	var duration, queueWait, coldWait, in, out int64
	err := row.Scan(&r.ID, &r.Start, &r.Namespace, &r.Function, &r.Trigger, &r.TriggerName, &status,
		&duration, &queueWait, &r.ColdStart, &coldWait, &in, &out, &r.Instance, &r.RequestID, &r.Error)
	r.Status, r.Duration, r.QueueWait, r.ColdStartWait = int(status), time.Duration(duration), time.Duration(queueWait), time.Duration(coldWait)
	r.BytesIn, r.BytesOut = int(in), int(out)
	return r, err
}

// summarySQL sums up a window by trigger and in all (the grouping set
// ()), with percentile_cont, as the ring interpolates.
const summarySQL = `select coalesce(trigger, ''), grouping(trigger) = 1, count(*),
	count(*) filter (where status >= 500),
	coalesce(percentile_cont(array[0.5, 0.95, 0.99]) within group (order by duration_ns), array[0, 0, 0]),
	count(*) filter (where cold_start),
	coalesce(percentile_cont(0.5) within group (order by cold_start_wait_ns) filter (where cold_start), 0)
from sless_invocations where namespace = $1 and function = $2 and started_at >= $3
group by grouping sets ((trigger), ()) order by 2 desc, 1`

// Summary sums up a function's records since a time.
func (s *Store) Summary(ctx context.Context, namespace, function string, since time.Time) (invocation.Summary, error) {
	sum := invocation.Summary{Namespace: namespace, Function: function, Since: since, Triggers: []invocation.TriggerSummary{}}
	rows, err := s.pool.Query(ctx, summarySQL, namespace, function, since)
	if err != nil {
		return sum, fmt.Errorf("summary of %s/%s: %w", namespace, function, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t invocation.TriggerSummary
		var total bool
		var pct []float64
		var coldWait float64
		if err := rows.Scan(&t.Trigger, &total, &t.Count, &t.Errors, &pct, &t.ColdStarts, &coldWait); err != nil {
			return sum, fmt.Errorf("summary of %s/%s: %w", namespace, function, err)
		}
		t.P50Ms, t.P95Ms, t.P99Ms = pct[0]/1e6, pct[1]/1e6, pct[2]/1e6
		t.ColdStartWaitP50Ms = coldWait / 1e6
		if t.Count > 0 {
			t.ErrorRate = float64(t.Errors) / float64(t.Count)
		}
		if total {
			t.Trigger = ""
			sum.Total = t
		} else {
			sum.Triggers = append(sum.Triggers, t)
		}
	}
	if err := rows.Err(); err != nil {
		return sum, fmt.Errorf("summary of %s/%s: %w", namespace, function, err)
	}
	return sum, nil
}
