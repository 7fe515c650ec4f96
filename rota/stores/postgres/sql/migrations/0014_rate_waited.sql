-- rota schema, version 14 (PostgreSQL): which pending runs wait for a rate's window.
--
-- `flow_bump` moves a due rated run's due_at to the moment its rate's window opens again. A
-- deploy that changes the rate (a larger max, a shorter per) must give those runs back their
-- place (`flow_rate_reopen`) and no other: a run due later of its own accord (a delay, a
-- retry's backoff) keeps its time. The flag says which, set by the bump and cleared by the
-- claim that takes the run (flow_take); a constant default adds it without a rewrite.
-- Runs moved before this version carry no flag: they keep the old window's opening.
ALTER TABLE rota_runs ADD COLUMN rate_waited boolean NOT NULL DEFAULT false;
