"""What AddPartitionsToTxn, AddOffsetsToTxn and EndTxn share: waiting for the transaction coordinator's one
answer, and KIP-588's downgrade of PRODUCER_FENCED for the versions that came before it."""
from __future__ import annotations

import asyncio
from collections.abc import Callable

from protocol.errors import Errors

# PRODUCER_FENCED came with v2 of these APIs (KIP-588): older clients know it as INVALID_PRODUCER_EPOCH.
PRODUCER_FENCED_SINCE = 2


async def coordinator_answer(ask: Callable[[Callable[[Errors], None]], None], version: int) -> Errors:
    """Ask the coordinator (`ask(reply)`) and wait for its answer, as the request's version can carry it."""
    answer: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()

    def reply(error: Errors) -> None:
        if not answer.done():
            answer.set_result(error)

    ask(reply)
    error = await answer
    return Errors.INVALID_PRODUCER_EPOCH if error == Errors.PRODUCER_FENCED and version < PRODUCER_FENCED_SINCE \
        else error
