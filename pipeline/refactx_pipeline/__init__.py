"""refactx_pipeline: build prefix-tree indexes of knowledge-graph facts (Spark + PostgreSQL).

One module per stage of DESIGN.md. Each exposes pure DataFrame -> DataFrame functions (what
tests call) and a ``run(spark, cfg)`` -- ``run(spark, cfg, dsn)`` for a database stage -- that
reads the previous stage's Parquet, writes its own and returns its counts. ``pipeline.STAGES``
says which module runs each stage and what it needs; the CLI (``cli``) and the Airflow DAG
(through ``submit``) both run stages from there. Configuration: ``config.Config``.

The row format comes from the runtime package (``refactx_index.format``); the runtime never
imports this package.
"""

__version__ = "0.1.0"
