"""The layers of the whole tree, stated once and enforced on every import (as Kafka's import-control files do).

Each unit — a package of `coordinator_server/`, one of its top-level modules, or a top-level package — sits
in a layer, and may import only from its own unit or from units of lower layers. A new package or
top-level module fails this test until it is given a layer here: where it sits is a decision, so it is
made in this table and nowhere else. Every import counts (module level, inside a function, or under
`if TYPE_CHECKING:`), walked by tests/unit/test_import_graph.py's `arrows`.

From the bottom:
- `protocol` — Kafka's wire formats: bytes in and out, nothing of the coordinator.
- the group core (`group`) on the delayed-operation machinery (`purgatory`), its hot-path counters
  (`loop_tally`) and security's parsers and authorizer (`security`), which need nothing of ours; the
  transaction core (`txn`) beside it (it hashes ids with the group partitioner);
- settings (`config`) and metrics, which name the core's states;
- storage, then the topic store (`topics`), then the cluster's ZooKeeper view (`cluster`) and the replicas
  (`replication`);
- the runtime (the shell around the core) and beside it the transaction coordinator's shell
  (`txn_runtime`), then the network layer (`net`), the operator's tools (`tools`);
- the compositions: a cluster node, the application, the command line;
- the analytics pipeline and the benchmarks, which drive the server from outside.
"""
from __future__ import annotations

from pathlib import Path

from tests.unit.test_import_graph import REPO, arrows, module_names

PACKAGES = ("coordinator_server", "protocol", "pipeline", "benchmarks")

LAYERS: tuple[tuple[str, ...], ...] = (
    ("protocol", "coordinator_server"),  # the package's own __init__: a docstring
    ("coordinator_server.purgatory", "coordinator_server.loop_tally", "coordinator_server.security"),
    ("coordinator_server.group",),
    ("coordinator_server.txn",),
    ("coordinator_server.config", "coordinator_server.metrics"),
    ("coordinator_server.cluster_metrics",),
    ("coordinator_server.storage",),
    ("coordinator_server.topics",),
    ("coordinator_server.cluster",),
    ("coordinator_server.replication",),
    ("coordinator_server.runtime", "coordinator_server.txn_runtime"),
    ("coordinator_server.net",),
    ("coordinator_server.tools", "coordinator_server.cluster_node", "coordinator_server.security_settings"),
    ("coordinator_server.build_info",),
    ("coordinator_server.app",),
    ("coordinator_server.cli",),
    ("coordinator_server.__main__",),
    ("pipeline",),
    ("benchmarks",),
)
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def unit_of(module: str) -> str | None:
    """The longest unit `module` belongs to."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in LAYER_OF:
            return candidate
    return None


def all_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        modules.update(module_names(package))
    return modules


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in all_modules() if unit_of(m) is None)
    assert not unplaced, f"give these a layer in LAYERS: {unplaced}"


def test_every_import_points_down_or_within_its_unit() -> None:
    violations = set()
    for importer, imported in arrows(all_modules()):
        source, target = unit_of(importer), unit_of(imported)
        if source is None or target is None or source == target:
            continue
        if LAYER_OF[target] >= LAYER_OF[source]:
            violations.add(f"{importer} ({source}, layer {LAYER_OF[source]}) imports {imported} "
                              f"({target}, layer {LAYER_OF[target]})")
    assert not violations, "imports against the layer order:\n" + "\n".join(sorted(violations))


def test_the_table_names_only_what_exists() -> None:
    modules = all_modules()
    missing = [unit for unit in LAYER_OF if not any(m == unit or m.startswith(unit + ".") for m in modules)]
    assert not missing, missing
    assert (REPO / "coordinator_server").is_dir()
