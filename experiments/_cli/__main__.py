"""``python -m quiver.experiments._cli``: the ``quiver`` command, without its script."""

import sys

from quiver.experiments._cli import main

sys.exit(main())
