"""``python -m fleetfish.cli``: the same as the ``fleetfish`` console script."""

import sys

from fleetfish.cli import main

sys.exit(main())
