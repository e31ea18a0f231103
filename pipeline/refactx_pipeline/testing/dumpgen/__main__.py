"""``python -m refactx_pipeline.testing.dumpgen``: see ``command``."""

import sys

from refactx_pipeline.testing.dumpgen.command import main

sys.exit(main())
