"""Analytics over the coordinator's log with Apache Spark (docs/pipeline.md).

* `pipeline.columns` — what each Spark task runs: `__consumer_offsets` bytes -> Arrow batches, column-wise,
  parsed by hand as the server's replay does (the records of many batches at once: `pipeline.lockstep`);
* `pipeline.decode`  — pure Python: segment bytes -> rows the generic way (kafka-python's batches), the
  fallback and reference of `columns`, and the topic segments' batch headers (no Spark import);
* `pipeline.schema`  — the row schemas, shared by the driver and the workers;
* `pipeline.segments` — on the driver: listing the segments and cutting them into tasks of byte ranges;
* `pipeline.reader`  — the Spark reader: planned ranges (or `binaryFile` off the local filesystem) +
  `mapInArrow` into the typed `group_metadata`, `offset_commits` and `topic_batches` DataFrames;
* `pipeline.jobs`    — snapshot, rebalances and lag as DataFrame transformations;
* `pipeline.report`  — the static HTML report with PNG charts;
* `pipeline.explain` — pure Python: why each generation of a group came about, from its records and the
  server's JSON log; `pipeline.explain_job` collects those with Spark and writes `explain/generations`;
* `pipeline.main`    — `coordinator-server pipeline ...`, which hands `demo-data` and `cluster-run` to their
  modules and every job to `pipeline.cli`, the jobs' command line (also a spark-submit script);
* `pipeline.standalone` — a Spark standalone master and workers of this machine, owned subprocesses;
  `pipeline.cluster_run` runs a job on one started and stopped for it (`make pipeline-cluster`);
* `pipeline.demo_data` / `pipeline.demo_client` — a real server driven by real clients, for a log to read.

Installed with the `pipeline` extra (PySpark 4, pandas, pyarrow, matplotlib) and needs Java 17+.
"""
