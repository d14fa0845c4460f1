"""The span of each timed execution in the cpu and xla Chrome traces: written by the timing loops,
found again by view to summarize the profiled one."""

from __future__ import annotations

from neuronsweep.errors import UserError
from neuronsweep.formats.chrome_trace import Events

EXEC_MARK = "neuronsweep.exec_"  # name of the span of execution i in the cpu and xla Chrome traces


def profiled_span(events: Events, nth: int) -> tuple[dict, int]:
    """The complete ('X') events of a Chrome trace around its nth execution's span
    (chrome_trace.Events.slices_around: columns, times in ns) and that span's row; a trace without
    one cannot be summarized, so that fails with what to do."""
    mark = f"{EXEC_MARK}{nth}"
    found = events.slices_around(mark)
    if found is None:
        raise UserError(f"the trace has no '{mark}' span; recapture this case (delete its capture/ folder).")
    return found
