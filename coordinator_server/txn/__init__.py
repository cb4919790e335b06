"""The transaction coordinator's core: each transactional id's state machine (state.py, metadata.py), the
rules of the transactional APIs (operations.py) and the `__transaction_state` records (records.py).
Synchronous and clock-free, as the group core: every function takes `now_ms` and returns a decision."""
