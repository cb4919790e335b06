"""The README's client example is run as written against a real server: docs are part of the feature."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def _client_example() -> str:
    text = README.read_text()
    section = text[text.index("## Pointing a Kafka client at it"):]
    start = section.index("```python") + len("```python")
    return section[start:section.index("```", start)]


def test_readme_client_example_produces_and_consumes_as_a_group(server_factory: Any) -> None:
    server = server_factory()
    code = _client_example().replace("127.0.0.1:9092", f"127.0.0.1:{server.port}")
    # Collect what the example prints instead of printing it.
    consumed: list[tuple[int, int, bytes]] = []
    code = code.replace("print(record.partition, record.offset, record.key)",
                        "consumed.append((record.partition, record.offset, record.key))")
    namespace: dict[str, Any] = {"consumed": consumed}
    exec(compile(code, str(README), "exec"), namespace)
    assert len(consumed) == 1000
    assert {key for _, _, key in consumed} == {str(i).encode() for i in range(1000)}
    for name in ("producer",):
        namespace[name].close()
