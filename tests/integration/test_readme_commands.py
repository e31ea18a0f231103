"""The README's command blocks, run as written where that is cheap.

Every command line of the README's ``bash`` blocks is in RUN (run here, in a scratch folder
beside the installed ``.venv``, with the README's placeholders filled in) or in NOT_RUN with
the reason and the test that covers it; a command added to the README fails this test until it
is put in one of them. test_readme.py checks every command's options against its ``--help``.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .test_readme import FENCE, README

# placeholders the README writes, and what fills them here
PLACEHOLDERS = {
    "graph.toml": "the made-up financial graph's config (python -m refactx_testing.finance_example)",
    "PATH": "SmolLM2's model folder (what ./dev demo fetches; refactx_index.qa.models.model_directory)",
}
# (program, subcommand) -> why it is not run here, and where it is tested
NOT_RUN = {
    ("./dev", "demo"): "four minutes: tests/integration/test_demo.py runs the demo",
    ("./dev", "test"): "the suite itself",
    ("export", None): "sets the production DSN the next lines use",
    ("refactx-pipeline", "build"): "Spark stages into PostgreSQL: tests/integration/test_end_to_end.py, tests/integration/test_graph_dag.py",
    ("refactx-pipeline", "builds"): "reads a production catalog: tests/pipeline/test_provenance.py reads builds' bytes",
    ("refactx-pipeline", "questions"): "Spark over a build: tests/pipeline/test_questions.py",
    ("refactx", "complete"): "a production DSN: tests/pipeline/test_cli_errors.py and tests/runtime/test_explore.py",
    ("refactx", "serve"): "a model behind a port: tests/runtime/test_server_cli.py",
    ("curl", None): "asks the server above",
    ("refactx", "ask"): "minutes of generation on two cores: tests/runtime/test_metaqa.py, tests/runtime/test_generation_model.py",
    ("refactx", "eval"): "a model over many questions: tests/runtime/test_metaqa.py",
}
RUN = {("refactx-pipeline", "graph-index")}


def readme_command_lines() -> list[list[str]]:
    """Each command of the README's bash blocks, as its words (continuations joined, comments
    dropped)."""
    lines = []
    for fence in FENCE.finditer(README.read_text(encoding="utf-8")):
        if fence.group(1) not in ("bash", "sh"):
            continue
        for line in fence.group(2).replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                lines.append(words)
    return lines


def _key(words: list[str]) -> tuple[str, str | None]:
    program = words[0].removeprefix(".venv/bin/")
    sub = words[1] if len(words) > 1 and not words[1].startswith("-") and program != "export" \
        and program != "curl" else None
    return program, sub


def test_every_readme_command_is_run_or_says_why_not():
    keys = {_key(words) for words in readme_command_lines()}
    assert RUN <= keys, f"RUN names commands the README no longer has: {sorted(RUN - keys)}"
    unclassified = sorted((k for k in keys if k not in RUN and k not in NOT_RUN), key=str)
    assert unclassified == [], f"README commands neither run here nor in NOT_RUN: {unclassified}"


@pytest.mark.slow
def test_the_readme_graph_index_command_runs_as_written(tmp_path):
    from refactx_index import MemoryTreeIndex
    from refactx_index.qa.models import model_directory

    bin_dir = Path(sys.executable).parent
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(bin_dir)
    subprocess.run([sys.executable, "-m", "refactx_testing.finance_example", str(tmp_path / "graph")],
                   check=True, capture_output=True, timeout=120)
    (tmp_path / "graph.toml").write_text((tmp_path / "graph" / "graph.toml").read_text())
    fill = {"graph.toml": "graph.toml", "PATH": str(model_directory("smollm2"))}
    assert fill.keys() == PLACEHOLDERS.keys()
    ran = 0
    for words in readme_command_lines():
        if _key(words) not in RUN:
            continue
        argv = [w.replace("=PATH", "=" + fill["PATH"]) for w in words]
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{' '.join(words)} exits {proc.returncode}: {proc.stderr[-2000:]}"
        ran += 1
    assert ran == len(RUN)
    index = MemoryTreeIndex.load(str(tmp_path / "graph.rfx"))
    assert index.info.facts > 1000
