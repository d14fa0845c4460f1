"""The one exception type a user can cause; the CLI turns it into one sentence and exit code 2."""


class UserError(Exception):
    """Bad input or a failed case: the message says what, where (file, key, case) and how to fix it."""


ERROR_PREFIX = "neuronsweep: error: "  # the line aggregate looks for in a failed stage's log
