-- Chains (a function's async.onSuccess, onFailure): the run whose end
-- made a run, how many links from the run a caller submitted it is, and
-- the run its own end made. Constant defaults: no table rewrite.
alter table sless_runs
	add column parent text not null default '',
	add column depth smallint not null default 0,
	add column next text not null default '';
