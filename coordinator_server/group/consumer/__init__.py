"""KIP-848 consumer groups: the next-generation rebalance protocol, served beside the classic one.

The coordinator computes every assignment itself and hands it out incrementally through
ConsumerGroupHeartbeat: a member revokes what it must give up, and a partition goes to its new owner only
once its old owner has let it go, so members that keep their partitions never stop fetching them.

A functional core like the classic one (`coordinator_server/group/`): synchronous, time passed in, records
out. The parts, each a module of its own:

- `records.py`   the ConsumerGroup* records of `__consumer_offsets` as plain values
- `member.py`    a member (immutable: an update is a new member, compared with the old one)
- `group.py`     a group, changed only by applying records (the same apply replays the log at load)
- `assignors.py` the server-side assignors, `uniform` and `range`, both sticky
- `target.py`    the target assignment of a new group epoch, and its records
- `reconciliation.py`  a member's way to its target: revoke first, then receive what others released
- `regex.py`     topic subscriptions by regular expression (RE2 semantics, checked in Python's `re`)
- `manager.py`   ConsumerGroupHeartbeat, leaving, fencing, the session and rebalance timeouts
"""
