"""``python -m lockgate.cli ...``: the ``lockgate`` command."""

import sys

from .command import main

sys.exit(main())
