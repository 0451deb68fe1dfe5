"""``python -m kdra`` is the ``kdra`` command."""

import sys

from kdra.cli import main

sys.exit(main())
