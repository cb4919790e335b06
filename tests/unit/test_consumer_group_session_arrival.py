"""A KIP-848 member's session runs from when its heartbeat arrived, not from when the core handled it."""
from __future__ import annotations

from protocol.errors import Errors

from .consumer_group_harness import GROUP, ConsumerHarness

SESSION_MS = 45_000


def _joined() -> tuple[ConsumerHarness, int]:
    h = ConsumerHarness()
    result = h.join("m1")
    assert result.error is Errors.NONE
    return h, result.member_epoch


def test_a_heartbeat_that_arrived_on_time_keeps_the_member_while_it_waits() -> None:
    h, epoch = _joined()
    h.sleep(SESSION_MS - 5_000)
    h.manager.note_heartbeat_arrival(GROUP, "m1", epoch, h.host.now_ms)  # queued behind the group's lock
    h.sleep(10_000)  # past the session counted from the join, before the heartbeat is handled
    assert "m1" in h.group.members
    result = h.heartbeat("m1", epoch)
    assert result.error is Errors.NONE


def test_without_an_arrival_the_session_still_expires() -> None:
    h, _ = _joined()
    h.sleep(SESSION_MS + 1)
    assert "m1" not in h.group.members


def test_an_arrival_at_a_stale_epoch_or_from_a_stranger_keeps_nobody_alive() -> None:
    h, epoch = _joined()
    h.sleep(SESSION_MS - 5_000)
    h.manager.note_heartbeat_arrival(GROUP, "m1", epoch + 7, h.host.now_ms)
    h.manager.note_heartbeat_arrival(GROUP, "stranger", epoch, h.host.now_ms)
    h.manager.note_heartbeat_arrival("no-such-group", "m1", epoch, h.host.now_ms)
    h.manager.note_heartbeat_arrival(GROUP, "m1", -1, h.host.now_ms)  # a leave restarts no session
    h.sleep(10_000)
    assert "m1" not in h.group.members
