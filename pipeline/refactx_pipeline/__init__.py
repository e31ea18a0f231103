"""refactx_pipeline: build prefix-tree indexes of knowledge-graph facts (Spark + PostgreSQL).

The package is laid out by role, in layers (docs/architecture.md states them; a test checks
that no module imports a higher layer and that no import circle exists):

- foundation modules here: ``config`` (the one config type), ``errors``, ``db`` (the one
  ``connect``), ``resources`` (package data), ``jvm`` (the lexer's jar), ``common`` (the
  Spark session, the counts files, the check of an earlier stage's output);
- ``catalog/``: the PostgreSQL catalog and the embedded server;
- ``stages/``: one module per stage of the Wikidata build, each with pure DataFrame functions
  (what tests call) and the ``run`` the orchestrator calls;
- ``graph/``: a team's own graph (rules, Spark stage, in-process index);
- ``orchestration/``: the stage table and how stages run (``pipeline``), the work-directory
  claim (``workdir``);
- ``scheduling/``: what the Airflow DAGs need (dump and export finding, run history, task bodies);
- ``cli/``: the ``refactx-pipeline`` command.

Test data made by code (the dump generator, the finance example) is not in the wheel: it is the
repository's ``devtools/refactx_testing``, for the tests and the benchmarks.

``submit.py`` is the file spark-submit runs for a stage. The row format comes from the
runtime package (``refactx_index.tree.format``); the runtime never imports this package.
"""

__version__ = "0.1.0"
