"""``python -m kdra`` is the ``kdra`` command."""

import sys

from kdra.main import main

sys.exit(main())
