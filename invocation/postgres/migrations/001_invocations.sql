-- Invocation records, partitioned by day so that retention drops whole
-- partitions. The partitions themselves are created ahead by the store's
-- maintenance; the default partition only catches records far from now.
create table sless_invocations (
	id bigserial not null,
	started_at timestamptz not null,
	namespace text not null,
	function text not null,
	trigger text not null,
	trigger_name text not null,
	status smallint not null,
	duration_ns bigint not null,
	queue_wait_ns bigint not null,
	cold_start boolean not null,
	cold_start_wait_ns bigint not null,
	bytes_in bigint not null,
	bytes_out bigint not null,
	instance text not null,
	request_id text not null,
	error text not null
) partition by range (started_at);

create table sless_invocations_default partition of sless_invocations default;

-- The one index: a function's records newest first, which both the
-- history's pages and the summary's window read.
create index sless_invocations_by_function on sless_invocations (namespace, function, started_at desc, id desc);
