"""The spark-submit entry point of every stage: ``spark-submit dags/spark_stage.py <stage> ARGS``.

It runs the stage module's ``main(ARGS)`` with ``jobs`` imported as a package, with the
project root first on ``sys.path``, so a cluster node needs only the project directory (or
``--py-files``), not an installed package. Not a DAG file: ``dags/.airflowignore`` keeps
Airflow from parsing it.
"""

import os
import sys

# sys.path[0] is this file's directory (dags/); put the project root there instead, before
# any import that reads a file (os and sys are loaded with the interpreter), so that `jobs`
# and `refactx_index` resolve even where the project is not installed.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import importlib  # noqa: E402


def main(argv: list[str]) -> int:
    """Run one stage's ``main`` with the remaining arguments."""
    from jobs.pipeline import STAGE_NAMES, stage_module

    if not argv or argv[0] not in STAGE_NAMES:
        sys.stderr.write(f"usage: spark_stage.py {{{','.join(STAGE_NAMES)}}} [--config FILE] [--set K=V]...\n")
        return 2
    stage, args = argv[0], argv[1:]
    return importlib.import_module(stage_module(stage)).main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
