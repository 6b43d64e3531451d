"""``python -m venturi``: the same command line as the ``venturi`` console script."""

import sys

from venturi.cli import main

if __name__ == "__main__":
    sys.exit(main())
