"""The join and sync path does O(1) work per request in the size of the group: a request never scans the
member map; only the steps that happen once per generation do (entering a rebalance, completing the join,
storing and propagating the assignment). Counted, not timed: the member map counts its full scans while a
group of N members goes through the `make bench` rebalance (KIP-394 round trip, all join, all sync)."""
from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from typing import Any

from coordinator_server.group.member import MemberMetadata
from coordinator_server.group.state import COMPLETING_REBALANCE, STABLE
from protocol.errors import Errors
from tests.unit.group_harness import Harness, join_result


class ScanCountingDict(dict[str, MemberMetadata]):
    scans = 0

    def __iter__(self) -> Iterator[str]:
        ScanCountingDict.scans += 1
        return super().__iter__()

    def keys(self) -> KeysView[str]:  # type: ignore[override]
        ScanCountingDict.scans += 1
        return super().keys()

    def values(self) -> ValuesView[MemberMetadata]:  # type: ignore[override]
        ScanCountingDict.scans += 1
        return super().values()

    def items(self) -> ItemsView[str, MemberMetadata]:  # type: ignore[override]
        ScanCountingDict.scans += 1
        return super().items()


def _rebalance_scans(n: int) -> tuple[int, int]:
    """Scans of the member map while n members join a group whose first member completed generation 1
    alone (initial delay 0), as in the bench: (scans during the n joins, scans during the n syncs)."""
    h = Harness(initial_rebalance_delay_ms=0)
    kwargs: dict[str, Any] = {"version": 5, "session_ms": 30_000}
    first = h.join_new_member(**kwargs)
    h.sleep(0)
    leader = join_result(first).member_id
    group = h.group()
    group.members = ScanCountingDict(group.members)
    ScanCountingDict.scans = 0
    ids = [h.join(**kwargs).value.member_id for _ in range(n)]
    replies = [h.join(member_id=m, **kwargs) for m in ids]
    rejoin = h.join(member_id=leader, **kwargs)  # its generation-1 sync would be answered REBALANCE_IN_PROGRESS
    join_scans = ScanCountingDict.scans
    assert group.is_state(COMPLETING_REBALANCE) and group.generation_id == 2
    assert all(join_result(r).error is Errors.NONE for r in [*replies, rejoin])
    ScanCountingDict.scans = 0
    syncs = [h.sync("g", m, 2) for m in ids]
    syncs.append(h.sync("g", leader, 2, {m: b"x" for m in [leader, *ids]}))
    assert group.is_state(STABLE)
    assert all(s.value.error is Errors.NONE for s in syncs)
    return join_scans, ScanCountingDict.scans


def test_member_map_scans_per_rebalance_do_not_grow_with_the_group() -> None:
    small, large = _rebalance_scans(20), _rebalance_scans(400)
    # A scan per request would add hundreds; a fixed number per generation is the same for both sizes.
    assert small == large, (small, large)
    assert large[0] < 20 and large[1] < 20, large
