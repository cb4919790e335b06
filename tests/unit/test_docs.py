"""Keep the docs true to the code: configuration table, served-API table, quick start, dependency
rationale, every `path::name` code reference, every relative link, the README's size, and one place (the
"Not built yet" list of docs/architecture.md) for every gap the server has."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from coordinator_server.config import _OPTIONS, Config
from protocol.apis import API_TABLE

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
DECISIONS = DOCS / "decisions.md"
ARCHITECTURE = DOCS / "architecture.md"
CONFIGURATION = DOCS / "configuration.md"
PROTOCOL = DOCS / "protocol.md"
# Every page a reader can reach from the README: the gap rule and the link check cover all of them.
PAGES = [README, REPO / "docker" / "README.md", *sorted(DOCS.glob("*.md"))]
# Written by `make bench` and `make compat-matrix`; their code paths are relative to coordinator_server/.
GENERATED = {"performance.md", "compatibility.md"}
README_MAX_BYTES = 10_240  # the issue's bar: a newcomer's first five minutes, not a reference manual


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section (up to the next `## `)."""
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"no '## {heading}' section"
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


@pytest.fixture(scope="module")
def configuration() -> str:
    return CONFIGURATION.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def protocol_doc() -> str:
    return PROTOCOL.read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------- configuration


def config_rows(configuration: str) -> dict[str, list[str]]:
    """Flag (first word of the first cell's code span) -> row cells of docs/configuration.md's table."""
    rows = {}
    for cells in table_rows(section(configuration, "Flags")):
        spans = code_spans(cells[0])
        if spans and spans[0].startswith("--"):
            rows[spans[0].split()[0]] = cells
    return rows


@pytest.mark.parametrize(("flag", "attr"), [(flag, attr) for flag, attr, _t, _h in _OPTIONS])
def test_every_flag_is_in_the_configuration_table(configuration: str, flag: str, attr: str) -> None:
    rows = config_rows(configuration)
    assert flag in rows, f"{flag} is missing from the docs/configuration.md table"
    cells = rows[flag]
    assert f"COORDINATOR_{attr.upper()}" in code_spans(cells[1]), cells
    default = getattr(Config(), attr)
    if default is not None:
        assert cells[2] == str(default), f"{flag}: docs/configuration.md says default {cells[2]!r}, the code {default}"
    assert cells[3], f"{flag}: no Kafka equivalent given"


def test_topic_flag_is_in_the_configuration_table(configuration: str) -> None:
    rows = config_rows(configuration)
    assert "--topic" in rows
    assert "COORDINATOR_TOPIC" in code_spans(rows["--topic"][1])


def test_configuration_table_lists_no_unknown_flags(configuration: str) -> None:
    known = {flag for flag, _a, _t, _h in _OPTIONS} | {"--topic"}
    assert set(config_rows(configuration)) <= known


def test_precedence_rule_is_stated(configuration: str) -> None:
    # One rule, four levels: flag > environment variable > config file > default.
    assert re.search(r"flag\s*>\s*`?COORDINATOR_\*`?\s*environment\s+variable\s*>\s*`?--config`?\s*file\s*>\s*default",
                     configuration)


# ---------------------------------------------------------------------------------- compatibility


def compat_rows(protocol_doc: str) -> dict[int, list[str]]:
    """API key -> cells, for rows of docs/protocol.md's served-API table (| Name | Key | Served | ...)."""
    rows = {}
    for cells in table_rows(section(protocol_doc, "Served APIs")):
        if len(cells) > 2 and cells[1].isdigit():
            rows[int(cells[1])] = cells
    return rows


@pytest.mark.parametrize("key", sorted(API_TABLE))
def test_every_served_api_is_in_the_api_table(protocol_doc: str, key: int) -> None:
    spec = API_TABLE[key]
    rows = compat_rows(protocol_doc)
    assert key in rows, f"{spec.name} ({key}) is missing from the docs/protocol.md API table"
    name, _key, served, *_clients = rows[key]
    assert name == spec.name
    assert served == f"{spec.min_version}-{spec.max_version}"


def test_api_table_claims_nothing_more(protocol_doc: str) -> None:
    assert set(compat_rows(protocol_doc)) == set(API_TABLE)


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
    for doc in PAGES:
        if doc.name in GENERATED:
            continue
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


# --------------------------------------------------------------------------------- README and links


def test_readme_is_short(readme: str) -> None:
    size = len(readme.encode("utf-8"))
    assert size < README_MAX_BYTES, f"README.md is {size} bytes: move reference material to docs/"


def test_readme_lists_every_doc(readme: str) -> None:
    # "Where each topic is documented": a new page under docs/ is reachable from the README.
    listed = section(readme, "Where each topic is documented")
    for doc in sorted(DOCS.glob("*.md")):
        assert f"](docs/{doc.name})" in listed, f"README does not list docs/{doc.name}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+\s+(.*)$", page.read_text(encoding="utf-8"), re.MULTILINE)}


def _links() -> list[tuple[Path, str]]:
    links = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked here
                links.append((page, target))
    return links


@pytest.mark.parametrize(("page", "target"), _links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_relative_link_resolves(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{page.relative_to(REPO)} links to {target}: no such file"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), f"{page.relative_to(REPO)} links to {target}: no such heading"


# ------------------------------------------------------------------------------ one list of the gaps

# A sentence saying the server lacks something (or will have it later) goes stale silently when the
# thing arrives. So every such claim lives in one list, docs/architecture.md "Not built yet", which is
# the first place to update when a gap closes; anywhere else these phrases fail the test.
GAP_PHRASES = re.compile(
    r"\bnot[\s*_-]+(?:yet|implemented|supported|built|tested|served|planned)\b|\bplanned\b|\bbeing added\b"
    r"|\btoday there is\b|\bno flag\b|\bcomes? with the\b|\byet\b",
    re.IGNORECASE,
)
GAP_LIST = ("architecture.md", "Not built yet")
# (page, text on the same line) where such a phrase is not a claim about the server.
ALLOWED_GAP_CONTEXTS = [
    # The interop matrix (generated): limitations of the *clients*, not of the server.
    ("compatibility.md", "not supported by client"),
    ("compatibility.md", "Not supported by the client"),
    # Group state in the CLI output ("no commit yet" = the group has not committed to that partition).
    ("operations.md", "no commit yet"),
    # The durability of appends that have not reached the disk, not a missing feature.
    ("durability.md", "not-yet-flushed"),
    # A dated benchmark log (generated): what had been fixed at the time of a past run.
    ("performance.md", "nothing fixed yet"),
]


def _gap_claims() -> list[tuple[str, int, str]]:
    claims = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if page.name == GAP_LIST[0]:
            text = text.replace(section(text, GAP_LIST[1]), "")
        for number, line in enumerate(text.splitlines(), 1):
            # A link to the list is not a claim; other link targets are not prose.
            prose = re.sub(r"\[[^\]]*\]\([^)]*#not-built-yet\)", "", line)
            prose = re.sub(r"\]\([^)]*\)", "]", prose)
            if line.startswith("#") and GAP_LIST[1] in line:
                continue  # the list's own heading
            for match in GAP_PHRASES.finditer(prose):
                if not any(page.name == name and ctx in line for name, ctx in ALLOWED_GAP_CONTEXTS):
                    claims.append((f"{page.relative_to(REPO)}:{number}", match.group(0), line.strip()[:160]))
    return claims


def test_gaps_are_listed_only_in_the_architecture_doc() -> None:
    claims = _gap_claims()
    assert not claims, (
        "a 'not yet'-style claim outside docs/architecture.md 'Not built yet' (move it to that list, or say "
        "what the server does instead):\n" + "\n".join(f"  {where}: {phrase!r} in {line!r}"
                                                          for where, phrase, line in claims))


def test_gap_list_exists_and_is_a_list() -> None:
    items = re.findall(r"^- ", section(ARCHITECTURE.read_text(encoding="utf-8"), GAP_LIST[1]), re.MULTILINE)
    assert len(items) >= 3


@pytest.mark.parametrize("stale", [
    "today there is no topic store",  # the topic store exists (the --topic row said otherwise)
    "has no flag yet",
    "are *not* tested yet",
    "Java client are not tested yet",
])
def test_gap_rule_catches_the_stale_sentences_of_issue_13(stale: str) -> None:
    assert GAP_PHRASES.search(stale)


# --------------------------------------------------------------------------------------- log events


def _logs_paragraph() -> str:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    match = re.search(r"^\*\*Logs\*\*.*?(?=\n\n)", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/operations.md has no **Logs** paragraph"
    return match.group(0)


NOT_LOG_NAMES = {"console", "json", "debug", "event", "level", "timestamp"}  # flag values, structlog's own keys


@pytest.mark.parametrize("name", sorted({s for s in code_spans(_logs_paragraph())
                                         if re.fullmatch(r"[a-z_]+", s)} - NOT_LOG_NAMES))
def test_documented_log_events_and_fields_exist(name: str) -> None:
    # An event is logged as "name", a field passed as name=...; a renamed one leaves the docs stale.
    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "coordinator_server").rglob("*.py"))
    assert f'"{name}"' in source or re.search(rf"\b{name}=", source), f"docs/operations.md names {name!r}"


# The design notes the project was specified from live outside the repository, so a reader of the code or the
# docs cannot follow a pointer to them: a rule is stated in our own words, or links a page of docs/. The
# names are assembled here so that this file does not match itself.
OUTSIDE_DOCUMENTS = re.compile("|".join([
    re.escape("kafka-" + "semantics"), re.escape("seeds-" + "digest"), re.escape("../" + "shared/"),
    re.escape("style" + ".md"), r"\bseeds? 0\d\d\b",
    # a section number of one of them; a public standard's (an RFC's) is fine, named with its number
    r"(?<!RFC \d\d\d\d )" + "\u00a7"]))
SOURCE_DIRS = ("coordinator_server", "protocol", "tests", "pipeline", "benchmarks", "scripts", "docker", "docs")


def _project_texts() -> list[Path]:
    files = [README, REPO / "Makefile", REPO / "pyproject.toml", REPO / "setup.py"]
    for top in SOURCE_DIRS:
        files += [p for p in (REPO / top).rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".go", ".js",
                                                                                       ".java", ".yml", ".sh"}
                  and "node_modules" not in p.parts]
    return files


def test_no_pointer_to_documents_outside_the_repository() -> None:
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _project_texts()
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if OUTSIDE_DOCUMENTS.search(line)]
    assert not hits, "say the rule in our own words or link docs/:\n" + "\n".join(hits)
