"""What one connection may cost the server while it is not being served: how long it may sit without
sending a whole request, and how many response bytes it may leave unread.

Pure and transport-free, so the streams connection of today and an asyncio.Protocol connection (frames
cut in data_received) apply the same rules: the shell reports events with `now` and the transport's
count of unsent bytes, and acts on the answers (pause or resume reading; close when `expired` names a
reason).

- Idle (Kafka's connections.max.idle.ms): the clock starts when the connection opens, when a response
  has been handed to the transport, and whenever the transport's unsent bytes shrink. It does not run
  while a request is being served (a parked JoinGroup or long-poll Fetch is the server's wait, bounded
  by its own timeouts). Bytes of an unfinished frame do not restart it: a client sending a header one
  byte a second is closed after the same time as a silent one (reason `partial_frame`), and one that
  never reads its responses is closed when the unsent bytes have not shrunk for that long
  (`unsent_responses`).
- Unsent responses: once more than `max_unsent_bytes` are queued the connection is not read until they
  drop to a quarter of that (asyncio's default low-water mark), so a client that sends and never reads
  holds at most that plus one response in server memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class ConnectionRules:
    max_idle_ms: int = 600_000  # connections.max.idle.ms
    max_unsent_bytes: int = 65_536  # responses queued for a client before its requests stop being read

    @property
    def resume_unsent_bytes(self) -> int:
        return self.max_unsent_bytes // 4


class Reading(Enum):
    PAUSE = "pause"
    RESUME = "resume"


class ConnectionPolicy:
    def __init__(self, rules: ConnectionRules, now: float) -> None:
        self.rules = rules
        self._idle_s = rules.max_idle_ms / 1000
        self._since = now  # start of the current wait for the client
        self._serving = False  # a whole request is in and its response is not yet handed over
        self._unsent = 0
        self.paused = False

    def request_started(self) -> None:
        self._serving = True

    def request_finished(self, now: float, unsent: int) -> Reading | None:
        """Its response was handed to the transport (or it had none)."""
        self.answered(now)
        return self.unsent_changed(now, unsent)

    def answered(self, now: float) -> None:
        """Everything read has been answered; for a shell whose transport reports unsent bytes itself
        (`pause_writing`), so the hot path does not ask for them."""
        self._serving = False
        self._since = now

    def unsent_changed(self, now: float, unsent: int) -> Reading | None:
        if unsent < self._unsent:
            self._since = now  # the client is reading: that is activity
        self._unsent = unsent
        return self._reading()

    def deadline(self) -> float | None:
        """When `expired` may next say yes; None while a request is being served."""
        return None if self._serving else self._since + self._idle_s

    def expired(self, now: float, unsent: int, partial_frame: bool) -> str | None:
        """Why to close the connection now (a `coordinator_connections_timed_out` reason), or None."""
        self.unsent_changed(now, unsent)
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return None
        if unsent:
            return "unsent_responses"
        return "partial_frame" if partial_frame else "idle"

    def _reading(self) -> Reading | None:
        if not self.paused and self._unsent > self.rules.max_unsent_bytes:
            self.paused = True
            return Reading.PAUSE
        if self.paused and self._unsent <= self.rules.resume_unsent_bytes:
            self.paused = False
            return Reading.RESUME
        return None
