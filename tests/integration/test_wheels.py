"""Both packages as a user gets them: wheels built from the checkout, installed (not editable)
into a fresh virtual environment outside it, run from a directory that knows nothing of it.

The fresh environment gets the two wheels only; their dependencies (pyspark, numpy, ...) come
from the project's .venv through a .pth file, because tests have no network. Its own
site-packages comes first on sys.path, so the freshly installed packages are the ones imported
(checked). Each wheel installs one command named after it: the pipeline's `refactx-pipeline`
builds, the runtime's `refactx` reads what was built, and `refactx-index` (the runtime's
distribution name) only says where the commands are. `build --json` prints exactly one JSON
document on stdout, a build's progress in a log is plain lines (no redrawn bar), and `complete`
checks the vocabulary and fails with a clear message instead of showing nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ..conftest import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """A venv outside the checkout holding the two wheels built from the current sources."""
    base = tmp_path_factory.mktemp("wheels")
    for part in ("runtime", "pipeline"):
        shutil.copytree(ROOT / part, base / "src" / part,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                  "-w", str(base / "dist"), str(base / "src" / "runtime"), str(base / "src" / "pipeline")],
                 cwd=base, env=dict(os.environ))
    assert built.returncode == 0, built.stderr[-3000:]
    wheels = sorted(p.name for p in (base / "dist").glob("*.whl"))
    assert [w.split("-")[0] for w in wheels] == ["refactx_index", "refactx_pipeline"], wheels

    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base, env=dict(os.environ))
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                      "--no-index", *map(str, (base / "dist").glob("*.whl"))], cwd=base, env=dict(os.environ))
    assert installed.returncode == 0, installed.stderr[-3000:]
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=base, env=dict(os.environ)).stdout.strip())
    # the dependencies, appended after the fresh site-packages (no network in tests)
    (site / "zz_project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.fixture(scope="module")
def vocabularies(tmp_path_factory) -> tuple[Path, Path]:
    """Two small BPE vocabularies trained on the packaged example graph (no hub, no ../shared)."""
    from refactx_pipeline.cli.vocabulary import train_example_vocabulary
    from refactx_pipeline.resources import example_graph

    base = tmp_path_factory.mktemp("vocab")
    return (train_example_vocabulary(example_graph(), base / "example").parent,
            train_example_vocabulary(example_graph(), base / "other", vocab_size=400).parent)


def test_wheels_install_outside_the_checkout_build_and_serve(fresh_venv, vocabularies, pg_dsn, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REFACTX", "PYTHONPATH"))}
    env.update(REFACTX__SPARK__MASTER="local[2]", REFACTX__SPARK__DRIVER_MEMORY="1g")
    python = str(fresh_venv / "bin" / "python")
    cli, refactx = str(fresh_venv / "bin" / "refactx-pipeline"), str(fresh_venv / "bin" / "refactx")

    where = _run([python, "-c", "import refactx_index, refactx_pipeline.jvm as j; "
                  "print(refactx_index.__file__); print(j.jar_path())"], cwd=work, env=env)
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert Path(line).is_relative_to(fresh_venv), line  # the wheel's files, jar included

    helped = _run([cli, "--help"], cwd=work, env=env)
    assert helped.returncode == 0 and "path-index" in helped.stdout and "builds" in helped.stdout
    assert "complete" not in helped.stdout.split("positional arguments:")[1].split("options:")[0]
    served = _run([refactx, "--help"], cwd=work, env=env)
    assert served.returncode == 0 and "complete" in served.stdout and "serve" in served.stdout
    moved = _run([str(fresh_venv / "bin" / "refactx-index"), "build"], cwd=work, env=env)
    assert moved.returncode == 2 and moved.stdout == "", moved
    (line,) = moved.stderr.splitlines()
    assert line.startswith("refactx-index is now refactx-pipeline") and "refactx's" in line

    example_vocab, other_vocab = vocabularies
    built = _run([cli, "build", "--json", "--dsn", pg_dsn,
                  "--set", f"paths.build_root={work / 'build'}",
                  "--set", "input.dumps=" + str(fresh_venv_example(python, work, env)),
                  "--set", f"tokenize.vocabularies=example={example_vocab}"], cwd=work, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    report = json.loads(built.stdout)  # stdout is exactly one JSON document
    assert report["activate"]["example"]["name"] == "wikidata-example"
    assert report["load"]["vocabularies"]["example"]["rows"] > 0
    stages = [name for name in report if name != "seconds"]
    assert list(report["seconds"]) == stages and all(s > 0 for s in report["seconds"].values())
    # not a terminal: plain progress lines, never a bar redrawn with carriage returns
    assert "\r" not in built.stderr
    assert "  parse        started" in built.stderr
    assert len(built.stderr.splitlines()) < 60, built.stderr
    assert "NativeCodeLoader" not in built.stderr and "log4j" not in built.stderr, built.stderr

    text = " <Northern Ireland (part of the United Kingdom)> <"
    looked = _run([refactx, "complete", "--dsn", pg_dsn, "--index", "wikidata-example",
                   "--vocabulary", str(example_vocab), text], cwd=work, env=env)
    assert looked.returncode == 0, looked.stderr[-3000:]
    assert "<Northern Ireland (part of the United Kingdom)> <population> <1810863> ." in looked.stdout

    wrong = _run([refactx, "complete", "--dsn", pg_dsn, "--index", "wikidata-example",
                  "--vocabulary", str(other_vocab), text], cwd=work, env=env)
    assert wrong.returncode == 1
    assert "was built for vocabulary" in wrong.stderr and "Traceback" not in wrong.stderr

    absent = _run([refactx, "complete", "--dsn", pg_dsn, "--index", "wikidata-example",
                   "--vocabulary", str(example_vocab), " <No such entity at all> <"], cwd=work, env=env)
    assert absent.returncode == 3
    assert "no fact of index 'wikidata-example' starts with" in absent.stderr


def fresh_venv_example(python: str, work: Path, env: dict[str, str]) -> Path:
    """The example graph as package data of the installed wheel."""
    done = _run([python, "-c", "from refactx_pipeline.resources import example_graph; print(example_graph())"],
                cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())
