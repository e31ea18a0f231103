"""The environment traps, kept from coming back.

1. apache-airflow-providers-apache-spark 6.x depends on ``pyspark-client``, which installs
   its own copy of pyspark's Python files over pyspark's. With different versions the driver
   runs one version's Python against the other's JVM, and Arrow UDFs (the tokenizer's hot
   path) fail in the Python workers. constraints.txt pins both to one version; these tests
   check the installed result and run real Arrow UDFs.
2. The runtime package must stay slim and on its side of the border: ``import refactx_index``
   and its submodules must not pull in Spark, torch, transformers, the pipeline package or
   any other pipeline dependency, and no runtime source file imports the pipeline. The
   pipeline uses only the runtime's public API (``RUNTIME_PUBLIC_MODULES``), and the tests of
   runtime-only modules import nothing of pyspark.
"""

import base64
import hashlib
import importlib.metadata as metadata
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..import_graph import import_circles

ROOT = Path(__file__).resolve().parents[2]

# Top-level modules the runtime must not import (its dependencies are numpy and psycopg)
PIPELINE_MODULES = {
    "pyspark",
    "py4j",
    "pyarrow",
    "pandas",
    "tokenizers",
    "transformers",
    "torch",
    "airflow",
    "pydantic_settings",
    "refactx_pipeline",
}
# Runtime submodules that exist to use an optional extra (generation: torch, transformers;
# an engine adapter imports its engine: vLLM lives in its own virtual environment)
OPTIONAL_EXTRA_SUBMODULES = re.compile(r"^refactx_index\.(generat\w*|logits\w*|hf\w*|engines\.(transformers|vllm|vllm_beams|sglang))$")


def _pinned(requirement_file: Path, name: str) -> str | None:
    pattern = re.compile(rf"^{re.escape(name)}==(\S+)\s*$", re.IGNORECASE)
    for line in requirement_file.read_text().splitlines():
        match = pattern.match(line.strip())
        if match:
            return match.group(1)
    return None


def test_pyspark_and_pyspark_client_are_pinned_to_one_version():
    constraints = ROOT / "constraints.txt"
    pyspark_pin = _pinned(constraints, "pyspark")
    assert pyspark_pin, "constraints.txt must pin pyspark"
    assert _pinned(constraints, "pyspark-client") == pyspark_pin


def test_installed_pyspark_and_pyspark_client_versions_match():
    import pyspark

    pyspark_version = metadata.version("pyspark")
    try:
        client_version = metadata.version("pyspark-client")
    except metadata.PackageNotFoundError:
        pytest.skip("pyspark-client is not installed (no Airflow extra): nothing can overwrite pyspark")
    assert client_version == pyspark_version
    # the Python files actually imported are those of the installed pyspark distribution
    assert pyspark.__version__ == pyspark_version


def test_pyspark_python_files_on_disk_are_pyspark_own():
    """Every .py file pyspark installed still has the hash in pyspark's RECORD: nothing
    (pyspark-client of another version, a partial reinstall) has overwritten it."""
    dist = metadata.distribution("pyspark")
    checked, changed = 0, []
    for file in dist.files or ():
        if file.suffix != ".py" or file.hash is None:
            continue
        digest = hashlib.new(file.hash.mode, file.read_binary()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != file.hash.value:
            changed.append(str(file))
        checked += 1
    assert checked > 100, "pyspark's RECORD lists too few Python files to be a real install"
    assert changed == [], f"{len(changed)} pyspark files differ from pyspark's RECORD, e.g. {changed[:5]}"


@pytest.mark.spark
def test_map_in_arrow_runs_in_python_workers(spark):
    import pyarrow as pa
    import pyarrow.compute as pc

    def add_length(batches):
        for batch in batches:
            text = batch.column("text")
            yield pa.RecordBatch.from_arrays(
                [batch.column("id"), text, pc.utf8_length(text)], names=["id", "text", "length"]
            )

    df = spark.createDataFrame([(1, "Q42"), (2, "Douglas Adams"), (3, "")], "id long, text string")
    out = df.mapInArrow(add_length, "id long, text string, length int").orderBy("id").collect()
    assert [(r.id, r.length) for r in out] == [(1, 3), (2, 13), (3, 0)]


@pytest.mark.spark
def test_pandas_udf_runs_in_python_workers(spark):
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    # no `from __future__ import annotations` in this module: pandas_udf reads these hints
    @pandas_udf("string")
    def fact(subject: pd.Series, obj: pd.Series) -> pd.Series:
        return "<" + subject + "> <" + obj + "> ."

    df = spark.createDataFrame([("Northern Ireland", "United Kingdom"), ("Q1", "Q2")], "s string, o string")
    out = sorted(r.f for r in df.select(fact(F.col("s"), F.col("o")).alias("f")).collect())
    assert out == ["<Northern Ireland> <United Kingdom> .", "<Q1> <Q2> ."]


def _runtime_submodules() -> list[str]:
    import refactx_index

    names = [
        info.name
        for info in pkgutil.walk_packages(refactx_index.__path__, prefix="refactx_index.")
        if not OPTIONAL_EXTRA_SUBMODULES.match(info.name)
    ]
    return sorted(names)


def _modules_after_import(modules: list[str]) -> set[str]:
    """Top-level module names present after importing ``modules`` in a fresh interpreter."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def test_runtime_package_imports_no_pipeline_dependency():
    loaded = _modules_after_import(["refactx_index"])
    assert "refactx_index" in loaded
    assert loaded & PIPELINE_MODULES == set()


def test_runtime_submodules_import_no_pipeline_dependency():
    submodules = _runtime_submodules()
    assert {"refactx_index.tree.pg", "refactx_index.tree.format", "refactx_index.constraint.matcher"} <= set(submodules)
    loaded = _modules_after_import(submodules)
    assert loaded & PIPELINE_MODULES == set(), f"importing {submodules}"


def _imported_modules(path: Path) -> set[str]:
    """Every module named by an import statement of ``path`` (absolute names only)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_imports_cross_the_border_in_one_direction_only():
    """Runtime -> nothing of the pipeline; pipeline -> the runtime (its row format, errors).
    Checked on the installed packages' sources, lazy imports inside functions included."""
    import refactx_index
    import refactx_pipeline

    runtime_files = sorted(Path(refactx_index.__path__[0]).rglob("*.py"))
    assert len(runtime_files) > 10
    crossing = {
        str(f.name): sorted(m for m in _imported_modules(f) if m.partition(".")[0] in PIPELINE_MODULES - {"torch", "transformers", "tokenizers"})
        for f in runtime_files
    }
    assert {f: m for f, m in crossing.items() if m} == {}
    pipeline_files = sorted(Path(refactx_pipeline.__path__[0]).rglob("*.py"))
    uses_runtime = [f.name for f in pipeline_files
                    if any(m.startswith("refactx_index") for m in _imported_modules(f))]
    assert "prefix_rows.py" in uses_runtime  # the row format comes from the runtime


# The runtime's public API: the names ``refactx_index`` exports (its ``__all__``) and the public
# names (no leading underscore) of these modules. Its CLI (``cli``), the fact server
# (``server``) and the generation internals (``matcher``, ``masking``, ``batch``, ``generation``,
# ``engines.core``) are not part of it: the pipeline reaches none of them.
RUNTIME_PUBLIC_MODULES = {
    "errors", "connection", "tree.format", "tree.index", "tree.memory", "tree.pg", "tree.cache", "vocab", "tree.explore", "display", "qa.ask",
    "prompting.prompt", "qa.models", "prompting.paths", "tree.provenance", "qa.evaluation", "qa.policies", "engines.transformers",
}


def _runtime_uses(path: Path) -> list[tuple[str, str | None]]:
    """(runtime module, name imported from it or None) for each import of refactx_index in ``path``
    (lazy imports included); ``from refactx_index import format`` reads as the module."""
    import ast

    uses: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            uses += [(a.name, None) for a in node.names if a.name.partition(".")[0] == "refactx_index"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").partition(".")[0] == "refactx_index":
            for alias in node.names:
                if f"{node.module}.{alias.name}".partition(".")[2] in RUNTIME_PUBLIC_MODULES:
                    uses.append((f"{node.module}.{alias.name}", None))
                else:
                    uses.append((node.module, alias.name))
    return uses


def test_the_pipeline_uses_only_the_runtime_public_api():
    """Every import of refactx_index in the pipeline's sources and the DAG files names
    the package's exports or a public name of a public module: the runtime's internals (its
    CLI included) can change without the pipeline noticing."""
    import importlib.util

    import refactx_index
    import refactx_pipeline

    files = [*Path(refactx_pipeline.__path__[0]).rglob("*.py"), *(ROOT / "dags").glob("*.py")]
    public = {f"refactx_index.{m}" for m in RUNTIME_PUBLIC_MODULES}
    used, outside = set(), []
    for path in files:
        for module, name in _runtime_uses(path):
            used.add(module)
            if module == "refactx_index":
                ok = name in refactx_index.__all__ or name == "__version__"
            else:
                ok = module in public and (name is None or not name.startswith("_"))
            if not ok:
                outside.append(f"{path.name}: {module}" + (f".{name}" if name else ""))
    assert outside == [], "the pipeline reaches past the runtime's public API:\n" + "\n".join(sorted(outside))
    assert {"refactx_index.tree.format", "refactx_index.vocab", "refactx_index.display"} <= used
    missing = [m for m in sorted(public) if importlib.util.find_spec(m) is None]
    assert missing == [], f"RUNTIME_PUBLIC_MODULES names modules that do not exist: {missing}"


def _test_imports(path: Path) -> set[str]:
    """The modules a test file imports, lazy imports included, with those of the tests/ helpers
    it imports (``from .pgtree import ...``; from conftest.py, the imports of the functions it
    names, not of every fixture there)."""
    import ast

    helpers = {p.stem: p for p in [*(ROOT / "tests").glob("*.py"), *path.parent.glob("*.py")]
               if p.stem != "conftest"}
    conftest = {node.name: node for node in ast.parse((ROOT / "tests" / "conftest.py").read_text()).body
                if isinstance(node, ast.FunctionDef)}
    modules = _imported_modules(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.ImportFrom) and node.level >= 1):
            continue
        if node.module in helpers:
            modules |= _imported_modules(helpers[node.module])
        elif node.module == "conftest":
            for alias in node.names:
                body = conftest.get(alias.name)
                modules |= {n.module if isinstance(n, ast.ImportFrom) else a.name
                            for n in ast.walk(body) if isinstance(n, (ast.Import, ast.ImportFrom))
                            for a in n.names if not isinstance(n, ast.ImportFrom) or n.module} if body else set()
    return modules


def _imports_only_the_runtime(path: Path) -> bool:
    tops = {m.partition(".")[0] for m in _test_imports(path)}
    return "refactx_index" in tops and "refactx_pipeline" not in tops


def test_the_runtime_tests_import_nothing_of_pyspark():
    """tests/runtime starts no JVM: no test there imports pyspark (or py4j), itself or through a
    tests/ helper (conftest.py refuses it the Spark fixture); and no test in tests/pipeline
    imports the runtime alone (it belongs in tests/runtime)."""
    chosen = sorted((ROOT / "tests" / "runtime").glob("test_*.py"))
    misplaced = [p.name for p in sorted((ROOT / "tests" / "pipeline").glob("test_*.py")) if _imports_only_the_runtime(p)]
    assert misplaced == [], f"tests/pipeline holds tests of the runtime alone: {misplaced}"
    assert {"test_format.py", "test_cache.py", "test_explore.py"} <= {p.name for p in chosen}, chosen
    pulled = {path.name: sorted(m for m in _test_imports(path) if m.partition(".")[0] in ("pyspark", "py4j"))
              for path in chosen}
    assert {name: m for name, m in pulled.items() if m} == {}, "tests of runtime-only modules importing Spark"


# The pipeline's layers, lowest first (docs/architecture.md): a module may import its own layer
# and the layers below it, never one above. Top-level modules not listed are the foundation.
PIPELINE_LAYERS = {
    "catalog": 1,
    "stages": 2,
    "graph": 3,
    "questions": 3,
    "orchestration": 4,
    "scheduling": 5,
    "cli": 6,
    "submit": 7,  # the file spark-submit runs: an entry point, imported by nothing
}


def _pipeline_import_graph() -> dict[str, set[str]]:
    """Module -> the pipeline modules it imports (lazy imports inside functions included,
    relative imports resolved, ``from package import module`` read as the module)."""
    import ast

    import refactx_pipeline

    root = Path(refactx_pipeline.__path__[0])
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(["refactx_pipeline", *parts])] = (path, is_package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            imported.update(m for m in targets if m in modules and m != name)
        graph[name] = imported
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    return PIPELINE_LAYERS.get(parts[1], 0) if len(parts) > 1 else 0


def test_pipeline_layers_import_downwards_only():
    """No pipeline module imports a higher layer (a stage the orchestrator, the orchestrator
    the CLI...), checked on the installed sources, lazy imports included."""
    graph = _pipeline_import_graph()
    assert {"refactx_pipeline.stages.parse", "refactx_pipeline.orchestration.pipeline",
            "refactx_pipeline.cli.commands"} <= set(graph)
    # the orchestrator imports its stages (not looked up by name), so the check sees those edges
    assert {"refactx_pipeline.stages.parse", "refactx_pipeline.graph.stage"} <= graph["refactx_pipeline.orchestration.pipeline"]
    upward = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps if _layer(b) > _layer(a))
    assert upward == [], "imports from a lower layer to a higher one (docs/architecture.md):\n" + "\n".join(upward)


def test_test_data_generators_are_in_neither_wheel():
    """The dump generator and the finance example are devtools/refactx_testing: not shipped in
    the pipeline wheel, and importing neither package (so neither can come to depend on them)."""
    import importlib.util

    import refactx_testing

    assert importlib.util.find_spec("refactx_pipeline.testing") is None
    files = sorted(Path(refactx_testing.__path__[0]).rglob("*.py"))
    assert len(files) > 5
    for path in files:
        used = {m for m in _imported_modules(path) if m.partition(".")[0] in ("refactx_index", "refactx_pipeline")}
        assert used == set(), (path.name, used)


def test_pipeline_has_no_import_circle():
    """No module of the pipeline reaches itself through its imports (lazy ones included)."""
    graph = _pipeline_import_graph()
    circles = import_circles(graph)
    assert circles == [], "import circles in the pipeline:\n" + "\n".join(circles)


def test_installed_packages_are_wheels_not_the_checkout():
    """The code under test is the code a user installs: no editable install, no source tree
    on sys.path."""
    import refactx_index
    import refactx_pipeline

    for module in (refactx_index, refactx_pipeline):
        location = Path(module.__file__).resolve()
        assert "site-packages" in location.parts, location
        assert not {ROOT / "runtime", ROOT / "pipeline"} & set(location.parents), location
        direct_url = metadata.distribution(module.__name__.replace("_", "-")).read_text("direct_url.json")
        assert direct_url is None or '"editable": true' not in direct_url


# docker/ cannot be built here (no Docker engine); these checks keep it from drifting away
# from the repository it packages.
DOCKER = ROOT / "docker"


def test_dockerfile_copies_paths_that_exist():
    sources = []
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            parts = [p for p in line.split()[1:] if not p.startswith("--")]
            sources += parts[:-1]
    assert {"runtime", "pipeline", "constraints.txt"} <= set(sources)
    missing = [s for s in sources if not (ROOT / s).exists()]
    assert missing == [], f"docker/Dockerfile copies missing paths: {missing}"


def test_compose_wires_postgres_airflow_and_spark():
    import yaml  # PyYAML comes with Airflow

    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert services["postgres"]["image"] == "postgres:15"
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "spark-master", "spark-worker"):
        assert name in services, name
        build = services[name]["build"]
        assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == (DOCKER / "Dockerfile").resolve()
    scheduler_env = services["airflow-scheduler"]["environment"]
    assert scheduler_env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    # the DAG's config file for this environment exists
    assert (ROOT / "conf" / f"{scheduler_env['REFACTX_ENV']}.toml").exists()
    # the driver (scheduler) and the executors (worker) see the build root at one path
    assert set(services["airflow-scheduler"]["volumes"]) == set(services["spark-worker"]["volumes"])
