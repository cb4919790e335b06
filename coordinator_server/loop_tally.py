"""Latency histograms and request counts kept by the event loop with plain additions, compiled with the
request path (setup.py); `metrics.py` exposes them at scrape time.

Why not prometheus-client's Histogram: its `observe` takes a lock per bucket and one for the sum and runs as
interpreted code, about a microsecond, and the request tally and the log-append histogram are paid on every
request and every append. Only the loop thread writes a tally. The scrape thread reads them, and the GIL
makes each read of a list item or attribute whole (a scrape may see a request in the count a hair before
its bucket: Prometheus tolerates that, and prometheus-client's own histograms are not atomic across buckets
either).
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Final

# A C static once compiled, where an imported function's name is a dictionary lookup per call.
_bisect_left: Final = bisect.bisect_left


class LatencyTally:
    """One histogram: `buckets[i]` counts observations of at most `bounds[i]` seconds (and above the
    previous bound); the last bucket is +Inf. Not cumulative: the scrape accumulates, and the count is
    their sum."""

    __slots__ = ("bounds", "buckets", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.sum = 0.0
        self.buckets: list[int] = [0] * (len(bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        self.buckets[_bisect_left(self.bounds, seconds)] += 1

    def read(self) -> tuple[float, list[int]]:
        """(sum, buckets) copied, for a scrape on another thread."""
        return self.sum, list(self.buckets)


class RequestTallies:
    """A LatencyTally per (API, version), and non-zero error codes handed to `on_error(api, code)` (rare
    on the hot paths: a labelled prometheus-client counter is fine there)."""

    __slots__ = ("bounds", "on_error", "tallies")

    def __init__(self, bounds: tuple[float, ...], on_error: Callable[[str, int], None]) -> None:
        self.bounds = bounds
        self.on_error = on_error
        self.tallies: dict[tuple[str, int], LatencyTally] = {}

    def observe(self, api: str, version: int, seconds: float) -> None:
        tally = self.tallies.get((api, version))
        if tally is None:
            tally = self.tallies[(api, version)] = LatencyTally(self.bounds)
        tally.observe(seconds)

    def observe_error(self, api: str, version: int, seconds: float, error_code: int) -> None:
        """One request whose response carries a single top-level error code (the heartbeat fast path)."""
        self.observe(api, version, seconds)
        if error_code:
            self.on_error(api, error_code)

    def observe_errors(self, api: str, version: int, seconds: float, error_codes: Iterable[int]) -> None:
        """One request answered by a fast path, with the error codes its response carries."""
        self.observe(api, version, seconds)
        for code in error_codes:
            if code:
                self.on_error(api, code)

    def read(self) -> dict[tuple[str, int], tuple[float, list[int]]]:
        return {key: tally.read() for key, tally in list(self.tallies.items())}


class LoopCount:
    """A counter the event loop bumps with `count.value += n`: compiled, that is a field of a C struct,
    where an attribute of an interpreted object is a dictionary read and a write (bytes in and out, paid on
    every request)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0
