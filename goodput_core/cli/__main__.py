"""``python -m goodput_core.cli``: the ``goodput`` command."""

import sys

from goodput_core.cli import main

sys.exit(main())
