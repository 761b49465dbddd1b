-- A function's running runs by the end of their lease. Each claim first
-- ends as failed the runs whose last attempt's lease ran out, and no
-- other index finds running runs alone: sless_runs_due holds the queued
-- ones too, so with a backlog that look read every run queued, at each
-- claim (20 ms a claim with 100,000 queued), and a backlog drained in
-- quadratic time. Running runs are few (each activator's attempts under
-- way): the index is small.
create index sless_runs_running on sless_runs (namespace, function, not_before) where state = 'running';
