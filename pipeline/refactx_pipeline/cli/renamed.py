"""What the ``refactx-index`` console script runs: one line naming the pipeline's command,
``refactx-pipeline``, and exit status 2 (a usage error: the command is not run for the user).

``refactx-index`` is the runtime wheel's distribution name; its command is ``refactx``.
"""

from __future__ import annotations

import sys

MESSAGE = ("refactx-index is now refactx-pipeline (demo, build, builds, path-index, graph-index, questions); "
           "ask, complete and paths over a built index are refactx's\n")


def main() -> int:
    sys.stderr.write(MESSAGE)
    return 2
