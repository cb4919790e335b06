"""A runtime entry's answer as a future, for the APIs served by a task (decoded by kafka-python and awaited):
the runtime itself answers through callbacks, so that the APIs on the request's own path need no task."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def as_future(schedule: Callable[[T, Callable[[R], None], Callable[[BaseException], None]], None],
              inp: T) -> asyncio.Future[R]:
    """A runtime entry's answer as a future, for a caller that awaits it (an API served by a task)."""
    future: asyncio.Future[R] = asyncio.get_running_loop().create_future()

    def result(value: R) -> None:
        if not future.done():
            future.set_result(value)

    def failed(error: BaseException) -> None:
        if not future.done():
            future.set_exception(error)

    schedule(inp, result, failed)
    return future
