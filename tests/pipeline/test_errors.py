"""The pipeline's errors (refactx_pipeline.errors) and its one connection helper
(refactx_pipeline.db.connect): what a missing earlier stage says, and the bounds every
connection has."""

from __future__ import annotations

import time

import psycopg
import pytest

from refactx_index.errors import RefactxError


def test_every_pipeline_error_is_a_refactx_error():
    import refactx_index
    from refactx_index import errors as runtime_errors
    from refactx_pipeline import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), RefactxError), name
    # what only the pipeline raises is the pipeline's: the runtime's module does not name it
    for name in ("LoadError", "ValidationFailed", "ActivationRefused", "StageInputMissing", "RunConflict"):
        assert issubclass(getattr(errors, name), errors.PipelineError), name
        assert not hasattr(runtime_errors, name) and name not in refactx_index.__all__, name


def test_a_missing_stage_output_names_the_stage_to_run_first(cfg):
    from refactx_pipeline.common import stage_input
    from refactx_pipeline.errors import StageInputMissing

    with pytest.raises(StageInputMissing, match="run stage verbalize first") as caught:
        stage_input(cfg, "tokenize", "verbalize", "facts")
    assert caught.value.needs == "verbalize" and caught.value.stage == "tokenize"
    assert isinstance(caught.value, FileNotFoundError)
    with pytest.raises(StageInputMissing, match="run stage graph first"):
        stage_input(cfg, "verbalize", "parse", "statements", written_by="graph")
    (cfg.stage_dir("verbalize") / "facts").mkdir(parents=True)
    assert stage_input(cfg, "tokenize", "verbalize", "facts") == cfg.stage_dir("verbalize") / "facts"


@pytest.mark.pg
def test_a_database_stage_without_its_input_is_one_line_naming_the_stage_to_run_first(cfg, pg_dsn):
    """Load (and validate) read an earlier stage's output through ``stage_input``, so
    a missing one is ``StageInputMissing`` -- one line at the CLI -- not a KeyError or a
    Spark trace."""
    from refactx_pipeline.cli.failures import describe_failure
    from refactx_pipeline.config import VocabularyConfig
    from refactx_pipeline.errors import StageInputMissing
    from refactx_pipeline.stages import load
    from refactx_pipeline.stages.contract import StageContext

    cfg = cfg.updated({"tokenize.vocabularies": [VocabularyConfig(name="toy", path="")]})
    with pytest.raises(StageInputMissing) as caught:
        load.run(StageContext(cfg, dsn=pg_dsn))
    rows = cfg.stage_dir("prefix_rows") / "toy" / "rows"
    assert describe_failure(caught.value) == (
        f"stage load reads {rows}, which is not there: run stage prefix_rows first "
        "(refactx-pipeline build --stages prefix_rows,load)")
    rows.mkdir(parents=True)  # rows without the counts their stage writes last
    (rows / "part-0.parquet").write_bytes(b"PAR1")
    with pytest.raises(StageInputMissing, match="counts.json, which is not there: run stage prefix_rows"):
        load.run(StageContext(cfg, dsn=pg_dsn))


@pytest.mark.pg
def test_connect_sets_the_statement_timeout(pg_dsn):
    from refactx_pipeline.db import CATALOG_STATEMENT_TIMEOUT_MS, STAGE_STATEMENT_TIMEOUT_MS, connect

    with connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == f"{CATALOG_STATEMENT_TIMEOUT_MS // 60000}min"
    with connect(pg_dsn, statement_timeout_ms=STAGE_STATEMENT_TIMEOUT_MS) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == f"{STAGE_STATEMENT_TIMEOUT_MS // 3600000}h"
    # options of the DSN are kept, the timeout added after them
    with connect(f"{pg_dsn} options='-c search_path=pg_catalog'", autocommit=True) as conn:
        assert conn.execute("SHOW search_path").fetchone()[0] == "pg_catalog"
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "1min"


def test_connect_gives_up_on_an_unreachable_server_within_its_timeout():
    from refactx_pipeline.db import connect

    started = time.monotonic()
    # TEST-NET-1 (RFC 5737): routed nowhere, so the connection hangs rather than being refused
    with pytest.raises(psycopg.OperationalError):
        connect("postgresql://postgres@192.0.2.1:5432/postgres", connect_timeout_s=1)
    assert time.monotonic() - started < 10
