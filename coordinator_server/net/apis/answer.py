"""A request's answer through a future the connection waits on: the core's result encoded at the request's
version and framed once its callback comes (at once when refused before the core), counted in the metrics as
the generic path counts a request."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from kafka.protocol.api_message import ApiMessage

from coordinator_server import metrics
from protocol.framing import EncodedResponse, encode_response

R = TypeVar("R")

_perf_counter: Final = time.perf_counter


class FramedAnswer(Generic[R]):
    __slots__ = ("api", "correlation_id", "encode", "future", "started", "version")

    def __init__(self, api: str, version: int, correlation_id: int,
                 encode: Callable[[R, int], EncodedResponse | ApiMessage]) -> None:
        self.api, self.version, self.correlation_id, self.encode = api, version, correlation_id, encode
        self.started = _perf_counter()
        self.future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def result(self, result: R) -> None:
        """Called by the core, often in a loop over a group's members: a bug encoding this answer closes this
        connection (its future fails) and never reaches the core's loop."""
        if self.future.done():  # cancelled (the connection is shutting down)
            return
        try:
            response = self.encode(result, self.version)
            frame = encode_response(response, self.correlation_id)
        except Exception as e:
            self.future.set_exception(e)
            return
        self.future.set_result(frame)
        metrics.observe_request(self.api, self.version, _perf_counter() - self.started, response)

    def failed(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
