"""The spark-submit entry point of every stage:
``spark-submit --jars <jar> $(python -m refactx_pipeline.submit --path) <stage> ARGS``
(``all`` for every enabled stage in one application).

spark-submit runs a file, not a module, and puts the file's directory first on
``sys.path``: here that is the package directory itself, whose modules (``parse``,
``load``, ``config``...) would then shadow same-named top-level modules. The first
statement removes it, so ``refactx_pipeline`` is imported as the installed package.
"""

import os
import sys

if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]


def main(argv: list[str]) -> int:
    """Run one stage, or ``all``, with the remaining arguments (``--path``: print this file's path)."""
    from refactx_pipeline.orchestration.pipeline import ALL_STAGES, STAGE_NAMES, run_stage_main

    if argv == ["--path"]:
        sys.stdout.write(f"{os.path.abspath(__file__)}\n")
        return 0
    if not argv or argv[0] not in (*STAGE_NAMES, ALL_STAGES):
        sys.stderr.write(f"usage: submit.py {{{','.join((*STAGE_NAMES, ALL_STAGES))}}} [--config FILE] [--set K=V]...\n")
        return 2
    return run_stage_main(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
