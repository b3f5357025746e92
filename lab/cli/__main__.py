"""`python -m lab.cli`: the `lab` command, as the tests and the live world's server processes start it."""

import sys

from lab.cli import main

if __name__ == "__main__":  # a spawned child process re-imports this module under another name
    sys.exit(main())
