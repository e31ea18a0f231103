"""The spark-submit entry point of every stage: ``spark-submit dags/spark_stage.py <stage> ARGS``.

It runs ``jobs.<stage>.main(ARGS)`` with ``jobs`` imported as a package instead of running
``jobs/<stage>.py`` as a script. A script's own directory goes first on ``sys.path``, and
from ``jobs/`` the stage module ``jobs/tokenize.py`` shadows the standard library's
``tokenize`` (which ``logging`` imports through ``traceback`` and ``linecache``), so no
script in ``jobs/`` can even import logging; the stage modules' relative imports need their
package too. Not a DAG file: ``dags/.airflowignore`` keeps Airflow from parsing it.
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
    from jobs.pipeline import STAGE_NAMES

    if not argv or argv[0] not in STAGE_NAMES:
        sys.stderr.write(f"usage: spark_stage.py {{{','.join(STAGE_NAMES)}}} [--config FILE] [--set K=V]...\n")
        return 2
    stage, args = argv[0], argv[1:]
    return importlib.import_module(f"jobs.{stage}").main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
