"""Serving installs the runtime only: the refactx-index wheel, built from the checkout, in a
fresh virtual environment outside it, where neither pyspark nor the pipeline can be
imported; from there ``refactx ask`` answers from an index file and ``refactx serve`` serves,
and the runtime's own tests (tests/runtime) import and pass.

Tests have no network: the runtime's dependencies (torch, transformers, fastapi, ...) come
from the project's .venv through a .pth file, after the fresh site-packages, and a second
.pth line makes ``pyspark`` and ``refactx_pipeline`` unimportable there (checked)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest

from ..conftest import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _run(cmd, cwd, env, timeout=600):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("runtime-wheel")
    shutil.copytree(ROOT / "runtime", base / "src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                  "-w", str(base / "dist"), str(base / "src")], cwd=base, env=dict(os.environ))
    assert built.returncode == 0, built.stderr[-3000:]
    venv = base / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, dict(os.environ)).returncode == 0
    python = venv / "bin" / "python"
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                      "--no-index", *map(str, (base / "dist").glob("*.whl"))], base, dict(os.environ))
    assert installed.returncode == 0, installed.stderr[-3000:]
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     base, dict(os.environ)).stdout.strip())
    (site / "zz_project_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
        "import sys; sys.modules.update(pyspark=None, refactx_pipeline=None)\n")
    return venv


def test_the_runtime_wheel_alone_asks_and_serves(runtime_venv, sample_fact_texts, tmp_path):
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import model_directory

    index_file = tmp_path / "sample.rfx"
    MemoryTreeIndex.from_facts(sample_fact_texts, str(model_directory("smollm2") / "tokenizer.json")).save(index_file)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REFACTX", "PYTHONPATH", "VIRTUAL_ENV"))}
    python, refactx = str(runtime_venv / "bin" / "python"), str(runtime_venv / "bin" / "refactx")
    probe = _run([python, "-c", "import refactx_index, importlib.util as u\n"
                  "print(refactx_index.__file__)\n"
                  "for m in ('pyspark', 'refactx_pipeline'):\n"
                  "    try:\n        __import__(m); print('importable', m)\n"
                  "    except ImportError:\n        pass"], tmp_path, env)
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.split()[0]).is_relative_to(runtime_venv) and "importable" not in probe.stdout
    for pipeline_script in ("refactx-pipeline", "refactx-index"):  # the pipeline wheel's, not there
        assert not (runtime_venv / "bin" / pipeline_script).exists()

    tokenizer = str(model_directory("smollm2"))
    completed = _run([refactx, "complete", "--index-file", str(index_file), "--vocabulary", tokenizer,
                      " <Germany> <"], tmp_path, env)
    assert completed.returncode == 0, completed.stderr[-3000:]
    listed = [line.strip() for line in completed.stdout.split("facts:")[1].splitlines() if line.strip()]
    assert listed and all(line.startswith("<Germany> <") and line.endswith(" .") for line in listed)
    nothing = _run([refactx, "complete", "--index-file", str(index_file), "--vocabulary", tokenizer,
                    " <No such entity zq"], tmp_path, env)
    assert nothing.returncode == 3 and "no fact of index" in nothing.stderr

    asked = _run([refactx, "ask", "--index-file", str(index_file), "--beams", "1", "--max-new-tokens", "40",
                  "--json", "What is the capital of Germany?"], tmp_path, env)
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert json.loads(asked.stdout)["facts"]

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = subprocess.Popen([refactx, "serve", "--index-file", f"sample={index_file}", "--port", str(port)],
                              cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        for line in server.stderr:  # type: ignore[union-attr]
            lines.append(line)
            if "refactx: serving" in line:
                ready.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        assert ready.wait(300), "".join(lines)[-3000:]
        import httpx

        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=300, json={
            "model": "smollm2", "max_tokens": 40,
            "messages": [{"role": "user", "content": "What is the capital of Germany?"}]})
        assert r.status_code == 200 and r.json()["facts"], r.text
    finally:
        server.terminate()
        server.wait(60)


# Runtime tests that need neither a model nor a second process: run there in full. Every other
# file of tests/runtime is collected there (imported, fixtures resolved), so none of them can
# import the pipeline; the few tests that write a PostgreSQL build with the pipeline's catalog
# (tests/pgdb.py, pipeline_tree_loader) skip there, saying why.
RUNTIME_ONLY_RUN = ("test_format.py", "test_memory_index.py", "test_cache.py", "test_prefix_key.py")


def test_the_runtime_tests_pass_with_the_runtime_wheel_alone(runtime_venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_"))}
    pytest_in_venv = [str(runtime_venv / "bin" / "python"), "-m", "pytest", "-n", "0", "-p", "no:cacheprovider",
                      "-o", "addopts=", "-q"]
    collected = _run([*pytest_in_venv, "--collect-only", "tests/runtime"], ROOT, env)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert "refactx_pipeline" not in collected.stdout + collected.stderr
    assert "test_format.py" in collected.stdout and "test_server.py" in collected.stdout
    ran = _run([*pytest_in_venv, *(f"tests/runtime/{name}" for name in RUNTIME_ONLY_RUN)], ROOT, env, timeout=1200)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert " passed" in ran.stdout and " failed" not in ran.stdout
