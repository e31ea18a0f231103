"""The README's first command, as a user runs it: `refactx-pipeline demo`.

Runs in a subprocess (its own Spark application, which it stops) against a fresh
database, without ../shared: the example graph and a vocabulary trained on it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]


def test_demo_without_shared_builds_and_reads_back_facts(pg_dsn, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFACTX__")}
    proc = subprocess.run(
        [sys.executable, "-m", "refactx_pipeline.cli", "demo", "--shared", str(tmp_path / "absent"),
         "--build-root", str(tmp_path / "build"), "--dsn", pg_dsn, "--limit", "20"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for stage in ("parse", "labels", "verbalize", "tokenize", "prefix_rows", "load", "validate", "activate"):
        assert f"  {stage} " in out, f"no counts line for {stage}"
    # facts read back from PostgreSQL, rendered by the verbalize rules
    assert "<Northern Ireland (part of the United Kingdom)> <population> <1810863> ." in out
    assert "<Northern Ireland (part of the United Kingdom)> <coordinate location> <54.6, -6.5> ." in out
    assert (tmp_path / "build" / "wikidata" / "example" / "tokenize" / "counts.json").exists()
