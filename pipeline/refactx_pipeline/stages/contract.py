"""The stage contract: every stage module's ``run(ctx: StageContext) -> StageCounts``.

A stage is handed one ``StageContext`` and returns its counts. The context lives here, in
the stages' own layer, because every stage module names it and a stage may not import the
orchestrator above it (docs/architecture.md, checked by tests/integration/test_environment.py); the
orchestrator (``orchestration/pipeline.py``) builds one per stage and is the one place that
checks it against the stage table: a stage that needs Spark gets a session, a database stage
a DSN, validate and activate the build of every configured vocabulary, and no other stage
any build id. A stage therefore reads the fields it needs without checking them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, TypeAlias

from refactx_pipeline.config import Config

if TYPE_CHECKING:  # pyspark is heavy, and only its type is named here
    from pyspark.sql import SparkSession

# What every stage's ``run`` returns. In common: a JSON object (string keys; numbers,
# strings, booleans, None, lists and such objects as values) of what the stage read, kept and
# dropped, counted per reason where it drops anything. A stage of the vocabularies (tokenize
# ... activate) keys its counts per vocabulary under ``vocabularies`` (validate and activate
# return that mapping itself). The stage writes the same counts, before it returns, to
# ``<stage dir>/counts.json`` (``common.write_counts``: keys sorted; validate and activate
# under ``{"vocabularies": ...}``), which the run history and the Airflow DAG's ``record_run``
# read; the CLI shows the returned ones (its progress lines, ``build --json``).
StageCounts: TypeAlias = dict[str, Any]


@dataclass(frozen=True)
class StageContext:
    """What one stage run is handed.

    ``cfg``: the run's configuration. ``spark``: the session, None for a stage that needs
    none (load, activate). ``dsn``: the PostgreSQL the database stages (load, validate,
    activate) work in, else None. ``build_ids``: vocabulary -> build id, the builds validate
    and activate work on (what the run's load returned, or ``--build-id``), else None.
    """

    cfg: Config
    spark: SparkSession | None = None
    dsn: str | None = None
    build_ids: Mapping[str, int] | None = None
