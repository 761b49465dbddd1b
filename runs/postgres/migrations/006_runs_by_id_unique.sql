-- A run by its id and creation, unique: the planner then knows that a
-- batch of outcomes (one statement, joined to the runs by id and
-- created_at) finds one row each through this index. Without it, it
-- took the running runs from sless_runs_running and hashed them; that
-- index keeps an entry for every run that ever ran until a vacuum, and a
-- drain of 100,000 runs read them all at each batch. The id alone (Get)
-- is this index's prefix.
create unique index sless_runs_by_id_at on sless_runs (id, created_at);
drop index sless_runs_by_id;
