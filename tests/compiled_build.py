"""The modules setup.py compiles with mypyc, read from setup.py without running it."""
from __future__ import annotations

import ast
import importlib.machinery
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _listed(name: str) -> list[Path]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return [ROOT / ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError(f"setup.py has no {name}")


def compiled_sources() -> list[Path]:
    return _listed("COMPILED_MODULES")


def c_extension_sources() -> list[Path]:
    """The hand-written C extensions' sources (setup.py's C_EXTENSIONS)."""
    return _listed("C_EXTENSIONS")


def extension_of(source: Path) -> Path | None:
    """The compiled module built in place beside `source`, if there is one."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def source_of(path: Path, suffix: str = ".py") -> Path:
    """The .py (or `suffix`) beside a module file, compiled (`name.cpython-311-x86_64-linux-gnu.so`) or not.
    mypyc builds each module as two libraries (setup.py's separate build): `name.so`, what Python imports,
    and `name__mypyc.so`, the compiled code it loads; both belong to `name.py`."""
    return path.with_name(path.name.split(".")[0].removesuffix("__mypyc") + suffix)


def module_name(source: Path) -> str:
    return ".".join(source.relative_to(ROOT).with_suffix("").parts)
