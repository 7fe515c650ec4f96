"""What the SQL backends share: the generic store built on named queries (store.py over
base.py, rows.py, schedules.py, flow.py), enqueue steps, the flow claim's design (limits.py),
transactional handlers' common part, and the loader of every backend's SQL (queries.py).
A backend (rota/stores/<backend>/) brings its session, its specifics and its SQL."""
