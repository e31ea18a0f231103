"""The project's JVM code: the parse stage's N-Triples lexer, used as a Spark SQL function.

Its sources are package data (``refactx_pipeline/java``); the package build compiles them
into ``refactx_pipeline/java/refactx-jvm.jar`` (``pipeline/setup.py``), so the jar is part
of the installed wheel and nothing is built at run time.

    python -m refactx_pipeline.jvm     # print the jar's path (for spark-submit --jars)
"""

from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path

from refactx_index.errors import ConfigError

JAR_NAME = "refactx-jvm.jar"


def jar_path() -> Path:
    """The installed project jar; a clear error when this package was not built with it."""
    jar = files("refactx_pipeline") / "java" / JAR_NAME
    if not jar.is_file():
        raise ConfigError(
            f"{JAR_NAME} is missing from the installed refactx_pipeline package ({jar}): install the "
            "package from its wheel (./dev does), whose build compiles the lexer with javac"
        )
    return Path(str(jar))


if __name__ == "__main__":
    try:
        sys.stdout.write(f"{jar_path()}\n")
    except ConfigError as exc:
        sys.exit(str(exc))
