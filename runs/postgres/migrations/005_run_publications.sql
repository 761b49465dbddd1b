-- Answers published to a queue (a function's async.onSuccess, onFailure
-- with a queue): the queue, set in the write that ends the run, and when
-- the broker confirmed the message, null while it waits. The runs table
-- is the outbox: an answer is never lost between the run's end and the
-- broker. The index holds the waiting ones alone, the first ended first.
alter table sless_runs
	add column publish_to text not null default '',
	add column published_at timestamptz;
create index sless_runs_unpublished on sless_runs (completed_at) where publish_to <> '' and published_at is null;
