"""``python -m pytest_opperf compare|show``: see :mod:`pytest_opperf.cli`."""

import sys

from pytest_opperf.cli import main

sys.exit(main())
