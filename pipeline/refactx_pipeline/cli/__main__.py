"""``python -m refactx_pipeline.cli``: the ``refactx-pipeline`` command."""

import sys

from refactx_pipeline.cli.commands import main

sys.exit(main())
