"""The connection rules on a fake clock (coordinator_server/net/connection_policy.py)."""
from __future__ import annotations

from coordinator_server.net.connection_policy import ConnectionPolicy, ConnectionRules, Reading

RULES = ConnectionRules(max_idle_ms=10_000, max_unsent_bytes=1000)


def test_idle_connection_expires_after_max_idle() -> None:
    p = ConnectionPolicy(RULES, now=0.0)
    assert p.deadline() == 10.0
    assert p.expired(9.9, unsent=0, partial_frame=False) is None
    assert p.expired(10.0, unsent=0, partial_frame=False) == "idle"


def test_partial_frame_does_not_restart_the_clock() -> None:
    p = ConnectionPolicy(RULES, now=0.0)
    assert p.request_finished(5.0, unsent=0) is None  # a request served at 5 s
    # a slow-loris sends bytes of the next frame every second: still expires 10 s after the last response
    assert p.expired(14.0, unsent=0, partial_frame=True) is None
    assert p.expired(15.0, unsent=0, partial_frame=True) == "partial_frame"


def test_no_expiry_while_a_request_is_served() -> None:
    p = ConnectionPolicy(RULES, now=0.0)
    p.request_started()  # e.g. a JoinGroup parked for minutes
    assert p.deadline() is None
    assert p.expired(1000.0, unsent=0, partial_frame=False) is None
    p.request_finished(1000.0, unsent=0)
    assert p.deadline() == 1010.0


def test_unsent_bytes_pause_and_resume_reading() -> None:
    p = ConnectionPolicy(RULES, now=0.0)
    assert p.request_finished(1.0, unsent=900) is None
    assert p.request_finished(2.0, unsent=1001) is Reading.PAUSE and p.paused
    assert p.unsent_changed(3.0, unsent=600) is None  # still above the low mark (a quarter)
    assert p.unsent_changed(4.0, unsent=250) is Reading.RESUME and not p.paused


def test_client_that_never_reads_expires_but_a_slow_reader_does_not() -> None:
    p = ConnectionPolicy(RULES, now=0.0)
    p.request_finished(0.0, unsent=5000)
    assert p.expired(9.0, unsent=4000, partial_frame=False) is None  # it read 1000 bytes at 9 s: activity
    assert p.expired(18.9, unsent=4000, partial_frame=False) is None
    assert p.expired(19.0, unsent=4000, partial_frame=False) == "unsent_responses"
