import sys

from neuronsweep.cli import main

sys.exit(main())
