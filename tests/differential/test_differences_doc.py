"""The "Differences from Apache Kafka" table of docs/compatibility.md is the differential tests' list of
accepted differences: each row names a scenario that exists, says whether it is deliberate, a gap, or a bug of the
server, and why; and the section names the Kafka version tests/kafka/pom.xml pins."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

from tests.differential.harness import DOC, REPO, SCENARIOS, SECTION, documented

# Every scenario module, so that SCENARIOS holds all of them however the tests were selected.
for _path in sorted(Path(__file__).parent.glob("test_*.py")):
    importlib.import_module(f"tests.differential.{_path.stem}")

KINDS = {"deliberate", "gap", "bug"}


def test_every_row_names_a_scenario_a_kind_and_a_reason() -> None:
    rows = documented()
    for row in rows:
        assert row.difference.scenario in SCENARIOS, f"no scenario {row.difference.scenario!r}: {row}"
        assert row.kind in KINDS, f"kind must be one of {sorted(KINDS)}: {row}"
        assert len(row.why) > 10, f"say why: {row}"
    assert len(set(r.difference for r in rows)) == len(rows), "a row is listed twice"


def test_section_names_the_pinned_kafka_version() -> None:
    pom = (REPO / "tests" / "kafka" / "pom.xml").read_text()
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert match
    text = DOC.read_text(encoding="utf-8")
    body = text[text.index(f"## {SECTION}"):]
    assert f"Apache Kafka {match.group(1)}" in body


def test_compat_matrix_keeps_the_section() -> None:
    """`make compat-matrix` rewrites docs/compatibility.md from the interop results but carries this section
    over, so regenerating the matrix cannot drop the accepted differences."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compat_matrix", REPO / "scripts" / "compat_matrix.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = DOC.read_text(encoding="utf-8")
    kept = module.kept_section(text)
    assert kept.startswith(f"## {SECTION}\n") and text.endswith(kept)
    assert module.kept_section("# T\n\n## Other\n\nx\n") == ""
