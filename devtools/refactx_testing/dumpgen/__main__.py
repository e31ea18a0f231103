"""``python -m refactx_testing.dumpgen``: see ``command``."""

import sys

from refactx_testing.dumpgen.command import main

sys.exit(main())
