"""How long a failed authentication waits before it is answered, per (client address, user name).

Why not refuse an address after N failures (what this server did before): every client behind one
address — a shared host, a NAT, a Kubernetes node — shares the count, and one misconfigured client that
keeps retrying keeps the address locked forever, so correct clients are refused. Kafka never refuses; it
delays the failure answer (connections.failed.authentication.delay.ms). We keep that rule and make it
grow for the one key that keeps failing:

- A valid credential is never delayed and never refused: the delay applies only to the *failure* answer.
- The n-th failure of one (address, user) within `FORGET_S` of the previous one waits
  floor · 2^(n-1), capped at `max_delay`.
- Failure answers of one key are spaced: an answer is given no earlier than the previous one of that key
  plus the delay, so guessing with parallel connections does not multiply the rate — except that no
  connection is held longer than `max_delay` (held connections cost the server file descriptors).
- At most `max_entries` keys are tracked; the least recently failing key is forgotten first.

Pure: the caller passes `now` (monotonic seconds) and sleeps for the returned delay.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

FORGET_S = 60.0  # a key with no failure for this long starts again at the floor
MAX_USER_CHARS = 256  # longer user names are cut in the key so an attacker cannot make entries large


@dataclass(slots=True)
class _Failures:
    count: int
    last: float  # when the latest failure happened
    answer_at: float  # when the latest failure answer is (or was) due


@dataclass(frozen=True, slots=True)
class Delay:
    seconds: float  # hold the failure answer this long
    failures: int  # failures of this key in a row (within FORGET_S of each other), this one included
    evicted: bool  # tracking this key forgot the least recently failing one


class AuthFailureThrottle:
    def __init__(self, floor_ms: int, max_delay_ms: int, max_entries: int) -> None:
        self.floor_s = floor_ms / 1000
        self.max_delay_s = max(max_delay_ms, floor_ms) / 1000
        self.max_entries = max_entries
        self._keys: OrderedDict[tuple[str, str], _Failures] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def failed(self, address: str, user: str | None, now: float) -> Delay:
        """Record a failed authentication and say how long to hold its answer."""
        key = (address, (user or "")[:MAX_USER_CHARS])
        entry = self._keys.get(key)
        if entry is None or now - entry.last >= FORGET_S:
            entry = _Failures(0, now, now)
            self._keys[key] = entry
        self._keys.move_to_end(key)
        entry.count += 1
        entry.last = now
        step = self.floor_s * 2.0 ** min(entry.count - 1, 62)
        delay = min(step, self.max_delay_s)
        entry.answer_at = min(max(now, entry.answer_at) + delay, now + self.max_delay_s)
        evicted = len(self._keys) > self.max_entries
        if evicted:
            self._keys.popitem(last=False)
        return Delay(entry.answer_at - now, entry.count, evicted)
