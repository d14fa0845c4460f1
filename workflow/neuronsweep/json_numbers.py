"""A number as JSON gives it, checked once for every reader and analysis (a profile written by another
tool may hold text, booleans, NaN or infinities where a number belongs). Imports nothing of ours, so
the readers (formats/) and the analyses (analysis/) share it without importing each other."""

from __future__ import annotations

import math


def finite_number(value: object) -> float | None:
    """A finite number as JSON gives it (a number written as text too); None for anything else (a
    bool, other text, a list or object, NaN, an infinity). Every reader checks values with this."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None
