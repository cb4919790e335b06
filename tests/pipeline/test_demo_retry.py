"""`pipeline.demo_data.generate` writes the history again when a client stalls (kafka-python 3.0.12 now and
then stops dead after a quick second rebalance), from an empty directory, and gives up after its attempts."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import demo_data


def test_a_stalled_member_means_the_history_is_written_again_from_scratch(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    out = tmp_path / "demo"
    seen: list[list[str]] = []

    def fake_generate(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        seen.append(sorted(p.name for p in path.iterdir()))
        (path / "partial").write_text("from a stalled attempt")
        if len(seen) == 1:
            raise demo_data.MemberStalled("billing-1 did not commit")
        return path / "manifest.json"

    monkeypatch.setattr(demo_data, "_generate", fake_generate)
    assert demo_data.generate(out) == out / "manifest.json"
    assert seen == [[], []]  # the second attempt started from an empty directory


def test_it_gives_up_after_its_attempts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []

    def stalls(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        calls.append(path)
        raise demo_data.MemberStalled("orders-1 reported no 'assigned'")

    monkeypatch.setattr(demo_data, "_generate", stalls)
    with pytest.raises(demo_data.MemberStalled):
        demo_data.generate(tmp_path / "demo", attempts=2)
    assert len(calls) == 2
