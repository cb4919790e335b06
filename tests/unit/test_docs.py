"""Keep the docs true to the code: configuration table, compatibility matrix, quick start, dependency
rationale, and every `path::name` code reference in the docs."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from coordinator_server.config import _OPTIONS, Config
from protocol.apis import API_TABLE

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DECISIONS = REPO / "docs" / "decisions.md"
ARCHITECTURE = REPO / "docs" / "architecture.md"


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section (up to the next `## `)."""
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    """Cells of every markdown table row (header and separator rows included)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("|") and line.endswith("|"):
            rows.append([cell.strip() for cell in line[1:-1].split("|")])
    return rows


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------- configuration


def config_rows(readme: str) -> dict[str, list[str]]:
    """Flag (first word of the first cell's code span) -> row cells."""
    rows = {}
    for cells in table_rows(section(readme, "Configuration")):
        spans = code_spans(cells[0])
        if spans and spans[0].startswith("--"):
            rows[spans[0].split()[0]] = cells
    return rows


@pytest.mark.parametrize(("flag", "attr"), [(flag, attr) for flag, attr, _t, _h in _OPTIONS])
def test_every_flag_is_in_the_configuration_table(readme: str, flag: str, attr: str) -> None:
    rows = config_rows(readme)
    assert flag in rows, f"{flag} is missing from the README configuration table"
    cells = rows[flag]
    assert f"COORDINATOR_{attr.upper()}" in code_spans(cells[1]), cells
    default = getattr(Config(), attr)
    if default is not None:
        assert cells[2] == str(default), f"{flag}: README says default {cells[2]!r}, the code {default}"
    assert cells[3], f"{flag}: no Kafka equivalent given"


def test_topic_flag_is_in_the_configuration_table(readme: str) -> None:
    rows = config_rows(readme)
    assert "--topic" in rows
    assert "COORDINATOR_TOPIC" in code_spans(rows["--topic"][1])


def test_configuration_table_lists_no_unknown_flags(readme: str) -> None:
    known = {flag for flag, _a, _t, _h in _OPTIONS} | {"--topic"}
    assert set(config_rows(readme)) <= known


def test_precedence_rule_is_stated(readme: str) -> None:
    # One rule, four levels: flag > environment variable > config file > default.
    assert re.search(r"flag\s*>\s*`?COORDINATOR_\*`?\s*environment\s+variable\s*>\s*`?--config`?\s*file\s*>\s*default",
                     section(readme, "Configuration"))


# ---------------------------------------------------------------------------------- compatibility


def compat_rows(readme: str) -> dict[int, list[str]]:
    """API key -> cells, for rows of the compatibility matrix (| Name | Key | Served | ...)."""
    rows = {}
    for cells in table_rows(section(readme, "Compatibility")):
        if len(cells) > 2 and cells[1].isdigit():
            rows[int(cells[1])] = cells
    return rows


@pytest.mark.parametrize("key", sorted(API_TABLE))
def test_every_served_api_is_in_the_compatibility_matrix(readme: str, key: int) -> None:
    spec = API_TABLE[key]
    rows = compat_rows(readme)
    assert key in rows, f"{spec.name} ({key}) is missing from the README compatibility matrix"
    name, _key, served, *_clients = rows[key]
    assert name == spec.name
    assert served == f"{spec.min_version}-{spec.max_version}"


def test_compatibility_matrix_claims_nothing_more(readme: str) -> None:
    assert set(compat_rows(readme)) == set(API_TABLE)


# ------------------------------------------------------------------------------ quick start, deps


def test_quick_start_commands(readme: str) -> None:
    quick = section(readme, "Quick start in two commands")
    assert "make run" in quick and "make test" in quick


def test_makefile_has_the_quick_start_targets() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^run:", makefile, re.MULTILINE) and re.search(r"^test:", makefile, re.MULTILINE)


def _dependency_names() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    names = []
    for spec in specs:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec)
        assert match, spec
        names.append(match.group(0))
    return names


@pytest.mark.parametrize("name", _dependency_names())
def test_decisions_explain_every_dependency(name: str) -> None:
    text = DECISIONS.read_text(encoding="utf-8").lower()
    assert f"**{name.lower()}" in text, f"docs/decisions.md does not say why {name} is a dependency"


# ------------------------------------------------------------------------------- code references


def _references() -> list[tuple[str, str, str]]:
    refs = []
    for doc in (README, ARCHITECTURE, DECISIONS):
        for match in re.finditer(r"`([\w/]+\.py)::([\w.]+)`", doc.read_text(encoding="utf-8")):
            refs.append((doc.name, match.group(1), match.group(2)))
    return refs


def test_architecture_doc_has_references() -> None:
    assert len([r for r in _references() if r[0] == "architecture.md"]) > 50


@pytest.mark.parametrize(("doc", "path", "name"), _references())
def test_code_reference_exists(doc: str, path: str, name: str) -> None:
    source = REPO / path
    assert source.is_file(), f"{doc}: {path} does not exist"
    text = source.read_text(encoding="utf-8")
    for part in name.split("."):
        assert re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(part)}\b", text, re.MULTILINE), (
            f"{doc}: {path} defines no {part!r} (from {name})"
        )
