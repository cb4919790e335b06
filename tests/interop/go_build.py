"""Build the Go driver (tests/interop/go/driver: Sarama and kafka-go) once, into build/interop-go/.

Go here is Debian's `golang-go` with the libraries as Debian's `-dev` packages of sources under
/usr/share/gocode, so the build is GOPATH mode and offline (GO111MODULE=off): no module proxy, no go.mod.
The compiled packages are cached in build/go-cache, so a rebuild after the first (about 10 s on 2 cores)
takes about a second, and an up-to-date binary is not rebuilt at all. `make interop-deps` runs this; the
interop suite calls `driver_binary()` too (under a file lock: the xdist workers share one build), so an
edited driver is never run stale.

    python -m tests.interop.go_build     # prints the binary's path
"""
from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "interop" / "go" / "driver"
OUT_DIR = REPO / "build" / "interop-go"
BINARY = OUT_DIR / "interop-driver"
GOPATH = "/usr/share/gocode"
# Debian package -> the Go variable (in main.go) that reports its version.
PACKAGES = {"golang-github-shopify-sarama-dev": "main.saramaVersion",
            "golang-github-segmentio-kafka-go-dev": "main.kafkaGoVersion"}


def _package_version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False)
    if out.returncode != 0 or not out.stdout:
        raise RuntimeError(f"{package} is not installed: run `make interop-deps`")
    return out.stdout.split("-")[0]  # the upstream version: 1.22.1-1 -> 1.22.1


def _stale() -> bool:
    if not BINARY.exists():
        return True
    built = BINARY.stat().st_mtime
    return any(p.stat().st_mtime > built for p in SOURCE.glob("*.go"))


@functools.cache
def driver_binary() -> Path:
    go = shutil.which("go")
    if go is None or not Path(GOPATH).is_dir():
        raise RuntimeError("Go or the Go client libraries are not installed: run `make interop-deps`")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(OUT_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stale():
            flags = " ".join(f"-X {var}={_package_version(pkg)}" for pkg, var in PACKAGES.items())
            env = {**os.environ, "GO111MODULE": "off", "GOPATH": GOPATH, "GOFLAGS": "",
                   "GOCACHE": str(REPO / "build" / "go-cache"), "CGO_CFLAGS": "-Wno-deprecated-declarations"}
            tmp = BINARY.with_suffix(".tmp")
            result = subprocess.run([go, "build", "-ldflags", flags, "-o", str(tmp), "./tests/interop/go/driver"],
                                    cwd=REPO, env=env, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"go build failed:\n{result.stdout}{result.stderr}")
            tmp.replace(BINARY)
    return BINARY


if __name__ == "__main__":
    try:
        print(driver_binary())
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
