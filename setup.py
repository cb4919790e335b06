"""Compiles the request path's hot modules with mypyc (docs/decisions.md, "Build and compiled hot path").

Every other setting lives in pyproject.toml; this file only adds the extension modules. The modules stay
ordinary Python too: set COORDINATOR_PURE_PYTHON=1 when installing to skip the compiler (no C compiler on
the machine, or to debug with pdb inside them), at the cost of the speed in docs/performance.md.
"""
import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

# What a heartbeat, a JoinGroup/SyncGroup and an offset commit go through (the heartbeat's path first).
# A module here must pass mypy (mypyc enforces its annotations at run time), and a class of it that
# is subclassed by a module not listed says so with @mypyc_attr(allow_interpreted_subclasses=True).
COMPILED_MODULES = [
    "coordinator_server/net/connection.py",
    "coordinator_server/net/connection_policy.py",
    "coordinator_server/loop_tally.py",
    "coordinator_server/net/apis/context.py",
    "coordinator_server/net/apis/answer.py",
    "coordinator_server/net/apis/heartbeat.py",
    "coordinator_server/net/apis/join_group.py",
    "coordinator_server/net/apis/sync_group.py",
    "coordinator_server/net/apis/offset_commit.py",
    "coordinator_server/net/apis/offset_fetch.py",
    "coordinator_server/net/request_decode.py",
    "coordinator_server/net/handlers.py",
    "coordinator_server/security/authorizer.py",
    "coordinator_server/runtime/coordinator_runtime.py",
    "coordinator_server/runtime/scheduler.py",
    "coordinator_server/runtime/locks.py",
    "coordinator_server/runtime/appends.py",
    "coordinator_server/runtime/timer.py",
    "coordinator_server/group/coordinator.py",
    "coordinator_server/group/shard.py",
    "coordinator_server/group/classic_manager.py",
    "coordinator_server/group/classic_join.py",
    "coordinator_server/group/partitioner.py",
    "coordinator_server/group/rebalance.py",
    "coordinator_server/group/state.py",
    "coordinator_server/group/group.py",
    "coordinator_server/group/member.py",
    "coordinator_server/group/delayed.py",
    "coordinator_server/purgatory/purgatory.py",
    "coordinator_server/purgatory/operation.py",
    "coordinator_server/purgatory/timing_wheel.py",
    "protocol/wire_primitives.py",
    "protocol/framing.py",
    "protocol/wire_reader.py",
    "protocol/value_class.py",
    "coordinator_server/group/api.py",
    "coordinator_server/group/offsets.py",
    "coordinator_server/group/write_errors.py",
    "coordinator_server/storage/coordinator_log.py",
    "coordinator_server/storage/batch.py",
    "coordinator_server/storage/log.py",
    "coordinator_server/storage/log_reads.py",
    "coordinator_server/storage/segment.py",
    "coordinator_server/storage/index.py",
    "coordinator_server/storage/group_commit.py",
    "coordinator_server/storage/offset_commit_codec.py",
]

# Hand-written C, for what Python cannot do at all: a thread that runs syncfs(2) without ever taking the GIL
# (coordinator_server/storage/syncfs_thread.py; docs/decisions.md). Linux only, like syncfs; without it (or
# with COORDINATOR_PURE_PYTHON) the group-commit writer's Python sync thread does the same work.
C_EXTENSIONS = [
    "coordinator_server/storage/_syncfs_thread.c",
]


def ext_modules() -> list:
    if os.environ.get("COORDINATOR_PURE_PYTHON", "") not in ("", "0"):
        return []
    from mypyc.build import mypycify
    from setuptools import Extension

    c_extensions = [Extension(source[:-2].replace("/", "."), [source]) for source in C_EXTENSIONS
                    if sys.platform == "linux"]
    # separate=True: one C file and one shared library per module instead of one 27 MB C file, so the C
    # compiler runs on every core (build_ext below) -- about half the build time on two cores, at the same
    # speed (docs/decisions.md, "Build and compiled hot path").
    return mypycify(COMPILED_MODULES, opt_level="3", debug_level="1", target_dir="build/mypyc",
                    separate=True) + c_extensions


class ParallelBuildExt(build_ext):
    """build_ext compiling one extension per core unless told otherwise (`-j N`)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


setup(ext_modules=ext_modules(), cmdclass={"build_ext": ParallelBuildExt})
