-- A function's runs, the newest first: the admin API's listing of them.
create index sless_runs_by_function on sless_runs (namespace, function, created_at desc);
