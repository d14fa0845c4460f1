"""`python -m neuronsweep`: the same command line as the `neuronsweep` script."""

import sys

from neuronsweep.cli import main

sys.exit(main())
