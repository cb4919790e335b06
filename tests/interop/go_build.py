"""Build the two Go drivers of the interop suite once each, into build/interop-go/.

* `driver_binary()`: tests/interop/go/driver, Debian's old Sarama 1.22 and kafka-go 0.2.1 (clients `sarama`
  and `kafka-go`). Debian ships them as `-dev` packages of sources under /usr/share/gocode, so this build is
  GOPATH mode and offline (GO111MODULE=off): no module proxy, no go.mod.
* `module_driver_binary()`: tests/interop/go/mod, the current franz-go (with kadm), IBM Sarama and kafka-go
  0.4 (clients `franz-go`, `ibm-sarama`, `kafka-go-0.4`), pinned by that directory's go.mod and go.sum. This
  build is module mode: the first one downloads the pinned modules from the Go module proxy (GOPROXY,
  proxy.golang.org by default) into build/go-mod, checked against go.sum (-mod=readonly: a build never
  edits go.mod or go.sum); later builds find them there. The module cache is made writable (-modcacherw) so
  that `rm -rf build` can remove it. go.mod asks for Go 1.26 (its dependencies' minimum) and the build uses
  the `go` on PATH as it is (GOTOOLCHAIN=local: no toolchain download).

Both share the compiled-package cache build/go-cache, so a rebuild after an edit takes seconds, and an
up-to-date binary is not rebuilt at all (a binary is stale when any of its sources, go.mod or go.sum is
newer). `make interop-deps` runs this; the interop suite calls the two functions too (under a file lock:
the xdist workers share one build), so an edited driver is never run stale.

    python -m tests.interop.go_build     # builds both, prints their paths
"""
from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "interop" / "go" / "driver"
MODULE_SOURCE = REPO / "tests" / "interop" / "go" / "mod"
OUT_DIR = REPO / "build" / "interop-go"
BINARY = OUT_DIR / "interop-driver"
MODULE_BINARY = OUT_DIR / "interop-driver-mod"
GO_CACHE = REPO / "build" / "go-cache"
GO_MODCACHE = REPO / "build" / "go-mod"
GOPATH = "/usr/share/gocode"
# Debian package -> the Go variable (in main.go) that reports its version.
PACKAGES = {"golang-github-shopify-sarama-dev": "main.saramaVersion",
            "golang-github-segmentio-kafka-go-dev": "main.kafkaGoVersion"}


def _package_version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False)
    if out.returncode != 0 or not out.stdout:
        raise RuntimeError(f"{package} is not installed: run `make interop-deps`")
    return out.stdout.split("-")[0]  # the upstream version: 1.22.1-1 -> 1.22.1


def _stale(binary: Path, inputs: list[Path]) -> bool:
    if not binary.exists():
        return True
    built = binary.stat().st_mtime
    return any(p.stat().st_mtime > built for p in inputs)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Go is not installed: run `make interop-deps`")
    return go


def _build(binary: Path, inputs: list[Path], argv: list[str], env: dict[str, str], cwd: Path) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(OUT_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stale(binary, inputs):
            tmp = binary.with_suffix(".tmp")
            result = subprocess.run([*argv, "-o", str(tmp), "."], cwd=cwd, env={**os.environ, **env},
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"go build in {cwd} failed:\n{result.stdout}{result.stderr}")
            tmp.replace(binary)
    return binary


@functools.cache
def driver_binary() -> Path:
    go = _go()
    if not Path(GOPATH).is_dir():
        raise RuntimeError("the Go client libraries are not installed: run `make interop-deps`")
    flags = " ".join(f"-X {var}={_package_version(pkg)}" for pkg, var in PACKAGES.items())
    env = {"GO111MODULE": "off", "GOPATH": GOPATH, "GOFLAGS": "", "GOCACHE": str(GO_CACHE),
           "CGO_CFLAGS": "-Wno-deprecated-declarations"}
    return _build(BINARY, list(SOURCE.glob("*.go")), [go, "build", "-ldflags", flags], env, SOURCE)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text)[:3])


def _check_go_version(go: str) -> None:
    """go.mod's `go` line is the oldest Go its dependencies build with; an older `go` would fail on it."""
    wanted = re.search(r"^go (\S+)$", (MODULE_SOURCE / "go.mod").read_text(), re.MULTILINE)
    have = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout.strip()
    if wanted and (not have or _version(have) < _version(wanted[1])):
        raise RuntimeError(f"tests/interop/go/mod needs Go >= {wanted[1]} (its go.mod); {go} is {have or 'unknown'}: "
                           "put a newer Go first on PATH")


@functools.cache
def module_driver_binary() -> Path:
    go = _go()
    _check_go_version(go)
    env = {"GO111MODULE": "on", "GOFLAGS": "-mod=readonly -modcacherw", "GOTOOLCHAIN": "local",
           "GOCACHE": str(GO_CACHE), "GOMODCACHE": str(GO_MODCACHE), "CGO_ENABLED": "0"}
    inputs = [*MODULE_SOURCE.glob("*.go"), MODULE_SOURCE / "go.mod", MODULE_SOURCE / "go.sum"]
    return _build(MODULE_BINARY, inputs, [go, "build", "-trimpath"], env, MODULE_SOURCE)


if __name__ == "__main__":
    try:
        print(driver_binary())
        print(module_driver_binary())
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
