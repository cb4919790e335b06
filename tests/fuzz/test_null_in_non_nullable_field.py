"""Regression (found by the fuzz suite): a DeleteGroups v0 whose non-nullable `GroupsNames` array is sent
with length -1 was decoded by kafka-python as None and crashed the handler (`handler_failed` with a
TypeError traceback). It is malformed input: the connection is closed with `invalid_request_body`."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.conftest import ServerProcess

pytestmark = pytest.mark.fuzz

# size 24 | api 42 v0 corr 0 | client id null | GroupsNames count -1 | then bytes the body never needed
FRAME = (b"\x00\x00\x00\x18\x00*\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff"
         b"\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00")


def test_null_array_in_a_non_nullable_field_closes_with_a_reason(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", {}).start()
    try:
        with socket.create_connection((srv.host, srv.port), timeout=5) as sock:
            peer = "{}:{}".format(*sock.getsockname()[:2])
            sock.sendall(FRAME)
            assert sock.recv(64) == b""
        event = srv.wait_for_event("invalid_request_body", peer=peer)
        assert event["api"] == "DeleteGroups" and "GroupsNames" in event["error"], event
        assert not srv.events("handler_failed")
    finally:
        assert srv.terminate() == 0
