"""``python -m memtheory.cli``: the ``memtheory`` command."""

import sys

from memtheory.cli import main

sys.exit(main())
