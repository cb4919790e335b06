"""No god modules and no god classes: every module of the project's packages stays at or under
MAX_MODULE_LINES lines and every class at or under MAX_CLASS_LINES, counted with `ast` (a class from its
`class` line, decorators included, to its last line). Past those sizes a module or class has grown more
than one concept; split it by concept rather than raise a limit here."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("coordinator_server", "protocol", "pipeline", "benchmarks", "tests")
MAX_MODULE_LINES = 700
MAX_CLASS_LINES = 400


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def _class_lines(node: ast.ClassDef) -> int:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return (node.end_lineno or node.lineno) - first + 1


def oversized(paths: list[Path], root: Path = REPO) -> list[str]:
    """One line per module over MAX_MODULE_LINES and per class over MAX_CLASS_LINES."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(root))
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{name}: module of {lines} lines (> {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.ClassDef) and (size := _class_lines(node)) > MAX_CLASS_LINES:
                found.append(f"{name}::{node.name}: class of {size} lines (> {MAX_CLASS_LINES})")
    return found


def test_no_module_or_class_over_the_limits() -> None:
    found = oversized(_sources())
    assert not found, "split these by concept:\n" + "\n".join(found)


def test_the_walk_sees_every_package() -> None:
    # A renamed or moved package would otherwise make the test above pass by checking nothing.
    for package in PACKAGES:
        assert any((REPO / package).rglob("*.py")), package


def test_a_long_class_is_named(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    path = tmp_path / "big.py"
    path.write_text(f"@decorated\nclass Big:\n{body}\n", encoding="utf-8")
    assert oversized([path], tmp_path) == [f"big.py::Big: class of {MAX_CLASS_LINES + 2} lines (> {MAX_CLASS_LINES})"]
