"""The keyed-timer service: one task per key, replaced on schedule, cancelled by key, forgotten once run."""
from __future__ import annotations

from coordinator_server.group.timers import KeyedTimer
from coordinator_server.purgatory import Timer

T0 = 1_000_000


def advance(timer: Timer, now_ms: int) -> None:
    while (due := timer.next_expiration_ms()) is not None and due <= now_ms:
        timer.advance_clock(due)
    timer.advance_clock(now_ms)


def test_a_new_schedule_under_a_key_replaces_the_old_task() -> None:
    timer = Timer(T0)
    timers = KeyedTimer(timer)
    fired: list[str] = []
    timers.schedule(("consumer", "g", "m", "session"), 100, T0, lambda: fired.append("first"))
    timers.schedule(("consumer", "g", "m", "session"), 300, T0, lambda: fired.append("second"))
    advance(timer, T0 + 200)
    assert fired == [] and timers.is_scheduled(("consumer", "g", "m", "session"))
    advance(timer, T0 + 300)
    assert fired == ["second"] and not timers.is_scheduled(("consumer", "g", "m", "session"))


def test_cancel_by_key_and_schedule_if_absent() -> None:
    timer = Timer(T0)
    timers = KeyedTimer(timer)
    fired: list[str] = []
    timers.schedule_if_absent(("consumer", "g", "m", "join"), 100, T0, lambda: fired.append("join"))
    timers.schedule_if_absent(("consumer", "g", "m", "join"), 500, T0, lambda: fired.append("later"))
    timers.schedule(("classic", "sync", "g"), 100, T0, lambda: fired.append("sync"))
    assert timers.scheduled("consumer") == {("consumer", "g", "m", "join"): T0 + 100}
    timers.cancel(("classic", "sync", "g"))
    timers.cancel(("classic", "sync", "absent"))  # nothing there: nothing to do
    advance(timer, T0 + 1000)
    assert fired == ["join"]
    assert timers.scheduled("consumer") == {} and timer.size() == 0


def test_an_operation_may_schedule_its_own_key_again() -> None:
    timer = Timer(T0)
    timers = KeyedTimer(timer)
    runs: list[int] = []

    def again() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            timers.schedule(("classic", "sync", "g"), 100, T0 + 100 * len(runs), again)

    timers.schedule(("classic", "sync", "g"), 100, T0, again)
    advance(timer, T0 + 1000)
    assert runs == [0, 1, 2] and not timers.is_scheduled(("classic", "sync", "g"))
