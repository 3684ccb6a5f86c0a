"""``python -m pytest_opperf compare|show``: see :mod:`pytest_opperf.cli`."""

import sys

from .cli import main

sys.exit(main())
