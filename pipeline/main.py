"""`coordinator-server pipeline ...`: the command, which hands each subcommand to its module.

    coordinator-server pipeline demo-data --out build/pipeline/demo      (pipeline.demo_data: no Spark)
    coordinator-server pipeline cluster-run [--workers N] JOB PATH... --out OUT
                                  (pipeline.cluster_run: a standalone cluster started and stopped for the run)
    coordinator-server pipeline JOB PATH... --out OUT                     (pipeline.cli: the Spark jobs)

A module of its own so that the jobs' command line (`pipeline.cli`, which cluster-run runs on its cluster)
does not depend back on the subcommands that use it.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence


def cli(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["demo-data"]:
        from pipeline import demo_data

        return demo_data.cli(args[1:])
    if args[:1] == ["cluster-run"]:
        from pipeline import cluster_run

        return cluster_run.cli(args[1:])
    from pipeline import cli as jobs_cli

    return jobs_cli.cli(args)


main = cli

if __name__ == "__main__":
    sys.exit(cli())
