-- Runs, partitioned by the day they were created, so that retention drops
-- whole partitions: a run is queued at most its function's async.maxAge,
-- far less than the retention, so a partition dropped holds only ended
-- runs. The store creates the partitions ahead.
create table sless_runs (
	id text not null,
	namespace text not null,
	function text not null,
	state text not null,
	attempts integer not null default 0,
	created_at timestamptz not null,
	started_at timestamptz,
	completed_at timestamptz,
	-- When the run is next due to be claimed: a queued run's next
	-- attempt, a running run's lease's end (a lapsed lease makes it due
	-- again). expires_at is when a queued run expires.
	not_before timestamptz not null,
	expires_at timestamptz not null,
	-- The request.
	method text not null,
	path text not null,
	header jsonb not null,
	body bytea not null,
	-- The last answer, and why the last attempt failed.
	status smallint not null default 0,
	content_type text not null default '',
	result bytea,
	result_truncated boolean not null default false,
	result_size bigint not null default 0,
	error text not null default ''
) partition by range (created_at);

create table sless_runs_default partition of sless_runs default;

create index sless_runs_by_id on sless_runs (id);
-- The runs to claim: a function's queued runs by due time, and its
-- running ones, whose leases may run out.
create index sless_runs_due on sless_runs (namespace, function, not_before)
	where state in ('queued', 'running');

-- Idempotency keys, each naming the run it made, for the key window.
create table sless_run_keys (
	namespace text not null,
	function text not null,
	key text not null,
	digest bytea not null,
	run_id text not null,
	created_at timestamptz not null,
	primary key (namespace, function, key)
);
create index sless_run_keys_by_age on sless_run_keys (created_at);
-- The queued runs to expire.
create index sless_runs_expiry on sless_runs (expires_at) where state = 'queued';
