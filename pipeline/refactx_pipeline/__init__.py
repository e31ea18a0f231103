"""Spark jobs, one module per stage of DESIGN.md.

Each module exposes pure DataFrame -> DataFrame functions (what tests call), a
``run(spark, cfg)`` that reads the previous stage's Parquet, writes its own and
returns its counts, and a thin ``main()`` for ``spark-submit``.
"""
