"""``python -m memtheory.cli``: the ``memtheory`` command."""

from memtheory.cli import console

if __name__ == "__main__":  # imported (a scan of the package's modules, say), it runs nothing
    console()
