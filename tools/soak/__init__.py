"""A whole-system soak with an invariant checker.

    python -m tools.soak --store sqlite|postgres --seed N --duration S --workers K
                         [--features schedules,limits,...] [--faults term,kill,proxy,damage]

A seeded, randomized mixed workload (schedules with every overlap and misfire policy, limits,
rates, `after=`, `unique_for`, retries, transactional handlers, cancels, concurrent
`retry_many`, a backfill, handlers that fork or block) runs on K real `rota worker` processes
while a fault injector sends SIGTERM and kill -9 to workers (and starts new ones), cuts every
worker's PostgreSQL connection through the fault proxy, and writes damaged rows. Handlers record
what they did (tools/soak/app.py); at the end the checker (checks.py, checks_flow.py) verifies
the invariants from the database and that evidence and prints PASS, or FAIL with each violated
invariant, its run ids, the seed and the command that replays it. The seed fixes every choice
of the workload, the injector and the handlers; the timing of processes is the machine's, so a
replay provokes the same mix, not the same interleaving.
"""
