"""The modules setup.py compiles with mypyc, read from setup.py without running it."""
from __future__ import annotations

import ast
import importlib.machinery
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compiled_sources() -> list[Path]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMPILED_MODULES" for t in node.targets):
            return [ROOT / ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError("setup.py has no COMPILED_MODULES")


def extension_of(source: Path) -> Path | None:
    """The compiled module built in place beside `source`, if there is one."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def source_of(path: Path) -> Path:
    """The .py beside a module file, compiled (`name.cpython-311-x86_64-linux-gnu.so`) or not."""
    return path.with_name(path.name.split(".")[0] + ".py")


def module_name(source: Path) -> str:
    return ".".join(source.relative_to(ROOT).with_suffix("").parts)
