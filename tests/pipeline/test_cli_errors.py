"""Bad input at the CLI: one message naming the file or the server and the cause, a non-zero
exit code, no traceback (unless -v), and never a password."""

from __future__ import annotations

import bz2
import os
import subprocess
import sys
from pathlib import Path

import pytest

from refactx_pipeline.cli.failures import redact_text
from refactx_pipeline.resources import example_graph


def refactx(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFACTX__")}
    env.update(REFACTX__SPARK__MASTER="local[1]", REFACTX__SPARK__DRIVER_MEMORY="1g")
    return subprocess.run([sys.executable, "-m", "refactx_pipeline.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("refactx-pipeline: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("text, shown", [
    ("postgresql://refactx:s3cret@db.internal:5432/refactx", "postgresql://refactx:****@db.internal:5432/refactx"),
    ("host=db user=refactx password=s3cret dbname=x", "host=db user=refactx password=**** dbname=x"),
    ("password='s3 cret' host=db", "password=**** host=db"),
    ("postgresql://postgres@127.0.0.1/x", "postgresql://postgres@127.0.0.1/x"),
])
def test_passwords_are_masked(text, shown):
    assert redact_text(text) == shown


@pytest.mark.pg
def test_a_database_that_refuses_is_one_line_without_the_password(tmp_path):
    proc = refactx("builds", "--dsn", "postgresql://nobody:s3cret@127.0.0.1:5432/no_such_db", cwd=tmp_path)
    line = one_error_line(proc)
    assert "no_such_db" in line or "nobody" in line
    assert "s3cret" not in proc.stderr + proc.stdout


def test_a_missing_dump_names_the_file(tmp_path):
    proc = refactx("build", "--stages", "parse", "--set", f"paths.build_root={tmp_path / 'b'}",
                   "--set", f"input.dumps={tmp_path / 'absent.nt.bz2'}", cwd=tmp_path)
    assert "absent.nt.bz2" in one_error_line(proc)


@pytest.mark.spark
@pytest.mark.slow
def test_a_truncated_bz2_dump_names_the_file_and_the_cause(tmp_path):
    data = bz2.compress(example_graph().read_bytes() * 40)
    dump = tmp_path / "cut.nt.bz2"
    dump.write_bytes(data[: len(data) // 2])
    proc = refactx("build", "--stages", "parse", "--set", f"paths.build_root={tmp_path / 'b'}",
                   "--set", f"input.dumps={dump}", cwd=tmp_path)
    line = one_error_line(proc)
    assert "cut.nt.bz2" in line, line
    assert "Exception" in line or "Error" in line, line
    assert len(proc.stderr) < 20_000  # not a 432-line trace


@pytest.mark.spark
def test_a_missing_enwiki_sql_dump_is_one_line_naming_it(tmp_path):
    proc = refactx("build", "--stages", "parse,sitelinks", "--set", f"paths.build_root={tmp_path / 'b'}",
                   "--set", f"input.dumps={example_graph()}",
                   "--set", f"input.enwiki_page={tmp_path / 'absent-page.sql'}",
                   "--set", f"input.enwiki_page_props={tmp_path / 'absent-props.sql'}", cwd=tmp_path)
    line = one_error_line(proc)
    assert "cannot read" in line and "absent-page.sql" in line
    # the JVM's start-up notes went to a file under the build directory, not to stderr
    noise = ("incubator modules", "NativeCodeLoader", "log4j")
    assert not [n for n in noise if n in proc.stderr], proc.stderr[-3000:]
    jvm_log = [p.read_text() for p in (tmp_path / "b").rglob("spark-jvm.log")]
    assert len(jvm_log) == 1 and any(n in jvm_log[0] for n in noise), jvm_log


def test_a_missing_index_file_for_ask_is_one_line_naming_it(tmp_path):
    """``refactx ask``, the runtime's command (the pipeline's has no ask)."""
    proc = subprocess.run([sys.executable, "-m", "refactx_index.cli", "ask", "--index-file",
                           str(tmp_path / "absent.rfx"), "What is the capital of Germany?"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("refactx: ")]
    assert "absent.rfx" in line
