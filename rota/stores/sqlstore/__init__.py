"""What the SQL backends share: the generic store built on named queries (store.py over
base.py, rows.py, schedules.py, flow.py), enqueue steps, the flow claim's design (limits.py),
transactional handlers' common part, and the loader of every backend's SQL (queries.py); what
SQLite and MySQL share apart from PostgreSQL: the flow claim step by step (stepwise_flow.py),
the tokens' counter row (token_counter.py), the finish's outcomes (outcomes.py).
A backend (rota/stores/<backend>/) brings its session, its specifics and its SQL, and imports
no other backend's package (tests/test_layout.py)."""
