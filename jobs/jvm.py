"""The project's JVM code (``jobs/jvm/src``): built into one jar, used as Spark SQL functions.

The jar is named after a hash of its sources, so a changed source always means a
new jar and a stale one is never picked up. ``jar_path()`` builds it when it is
missing (``javac`` against pyspark's own jars, a JDK 17 being what Spark needs
anyway); ``./dev setup`` and the Docker image build it ahead of time, so a DAG
can name it without building at parse time (``jar_path(build=False)``).

    python -m jobs.jvm        # build (if needed) and print the jar's path
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from refactx_index.errors import ConfigError

log = logging.getLogger(__name__)

SOURCES = Path(__file__).resolve().parent / "jvm" / "src"
BUILD = SOURCES.parent / "build"
JAVA_RELEASE = "17"


def _source_files() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def _sources_hash() -> str:
    digest = hashlib.sha256(JAVA_RELEASE.encode())
    for path in _source_files():
        digest.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def spark_jars_dir() -> Path:
    """The jars of the installed pyspark: what the code compiles against and runs with."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def jar_path(*, build: bool = True) -> Path:
    """The path of the project jar for the current sources, built first when ``build``."""
    jar = BUILD / f"refactx-jvm-{_sources_hash()}.jar"
    if build and not jar.exists():
        _build(jar)
    return jar


def _build(jar: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise ConfigError(
            "javac not found: the parse stage's lexer is Java code built on first use; "
            "install a JDK 17 (not only a JRE), or build the jar elsewhere with `python -m jobs.jvm`"
        )
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent jobs build it once
        if jar.exists():
            return
        log.info("building %s with javac", jar.name)
        with tempfile.TemporaryDirectory(dir=BUILD) as tmp:
            classes = Path(tmp) / "classes"
            cmd = [javac, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8",
                   "-cp", str(spark_jars_dir() / "*"), "-d", str(classes), *map(str, _source_files())]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise ConfigError(f"javac failed building {jar.name}:\n{done.stderr.strip()}")
            staged = Path(tmp) / jar.name
            with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as zf:
                for path in sorted(classes.rglob("*.class")):
                    zf.write(path, path.relative_to(classes).as_posix())
            staged.replace(jar)
        for old in BUILD.glob("refactx-jvm-*.jar"):
            if old != jar:
                old.unlink(missing_ok=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        sys.stdout.write(f"{jar_path()}\n")
    except ConfigError as exc:
        sys.exit(str(exc))
