"""``python -m specdec ...``: the same command line as the installed ``specdec`` script."""

import sys

from specdec.cli.app import main

sys.exit(main())
