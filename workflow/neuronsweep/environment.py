"""Names of the environment variables the package's processes pass each other, defined once: the
`neuronsweep` entry point reads them before importing anything else, so this module imports nothing."""

WARM_SOCKET = "NEURONSWEEP_WARM"  # host:socket path of the run's warm server (warmstart.py), set for its jobs
WARM_JOB = "NEURONSWEEP_WARM_JOB"  # in a child the warm server forked: the pid of the job it runs for
WARM_START = "NEURONSWEEP_WARM_START"  # "0": never start or use a warm server
