"""The one build step pyproject.toml cannot declare: compile the parse stage's lexer.

``build_py`` copies the package, then javac compiles ``refactx_pipeline/java/**/*.java``
against Spark's jars into ``refactx_pipeline/java/refactx-jvm.jar`` inside the build tree, so
the wheel ships the jar and nothing is ever written into the source tree or at run time.
Spark's jars come from ``SPARK_HOME/jars`` or from the pyspark importable by this build
(``pip wheel --no-build-isolation`` in an environment with the pinned pyspark).
"""

import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

JAVA_RELEASE = "17"
JAR_NAME = "refactx-jvm.jar"
HERE = Path(__file__).resolve().parent


def spark_jars_dir() -> Path:
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"]) / "jars"
    try:
        import pyspark
    except ImportError as exc:
        raise SystemExit(
            "refactx-pipeline's build compiles a Java lexer against Spark's jars: set SPARK_HOME, or build "
            "with --no-build-isolation in an environment that has pyspark installed"
        ) from exc
    return Path(pyspark.__file__).resolve().parent / "jars"


def compile_jar(sources: Path, jar: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise SystemExit("refactx-pipeline's build needs javac (a JDK 17) to compile the parse stage's lexer")
    java_files = sorted(sources.rglob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp) / "classes"
        cmd = [javac, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8",
               "-cp", str(spark_jars_dir() / "*"), "-d", str(classes), *map(str, java_files)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"javac failed:\n{done.stderr.strip()}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(classes.rglob("*.class")):
                # a fixed timestamp: the same sources give the same jar bytes
                info = zipfile.ZipInfo(path.relative_to(classes).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())


class BuildPyWithJar(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            raise SystemExit("refactx-pipeline is installed as a wheel (./dev does it): an editable install "
                             "would have no jar")
        compile_jar(HERE / "refactx_pipeline" / "java", Path(self.build_lib) / "refactx_pipeline" / "java" / JAR_NAME)


setup(cmdclass={"build_py": BuildPyWithJar})
