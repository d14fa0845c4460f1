"""The one exception type a user can cause. The CLI prints its sentence and exits 2 (a user's error) or 1
(anything else); a failed stage also keeps it as a record (store/failures.py)."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or a failed case: the message says what, where (file, key, case) and how to fix it."""


ERROR_PREFIX = "neuronsweep: error: "  # what the CLI prints before the sentence
