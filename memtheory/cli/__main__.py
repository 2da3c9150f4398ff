"""``python -m memtheory.cli``: the ``memtheory`` command."""

import sys

from memtheory.cli import main

if __name__ == "__main__":  # imported (a scan of the package's modules, say), it runs nothing
    sys.exit(main())
