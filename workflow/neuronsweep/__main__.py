"""`python -m neuronsweep`: the `neuronsweep` script's own entry (a stage through the run's warm server when
one takes it), so both start the same way."""

import sys

from neuronsweep.warmstart import main

sys.exit(main())
