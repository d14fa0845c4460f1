"""Throttling, read as Neuron Explorer reads it: the device lowering a NeuronCore's utilization limit (power,
thermal). Three sources, the best one the profile has:

- the throttle events (parquet `Throttle`: timestamp, duration, k, n, type, pcore_idx; the legacy JSON's `ham`
  table has the same fields) against TensorE's `ActiveTime` (legacy `active_time`): the limit k/n while TensorE
  was active. Explorer's summary page counts throttling "during active tensor engine periods" for its
  "Active FLOPS throttling" insight; throttling while TensorE idles costs nothing.
- `ThrottleSummary` (nc_idx, throttle_type, throttle_active_time_ns, throttle_active_time_percent,
  max_achievable_util_with_throttling_percent: 1.0 is no throttling, 0.5 half the capacity): per activity, over
  the whole execution.
- the summary's `throttle_<activity>_avg_util_limit_nc<i>_percent` and `_active_time_nc<i>_percent` fields
  (fractions), neuron-profile's older output (the real trn2 summary-text has them): over the whole execution.

Sources: profile-schema-reference.rst (Throttle, ThrottleSummary: "utilization_limit = k/n, throttling = 1 -
utilization_limit"); overview-summary-page.rst ("throttled_flops (active and inactive)", "Active FLOPS
throttling detected").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from neuronsweep.analysis.intervals import inside_each, merge
from neuronsweep.analysis.profile_tables import ProfileTables, columns, find_table

SUMMARY_FIELD = re.compile(r"^throttle_(activity_\d+|unknown)_(avg_util_limit|active_time)_nc(\d+)_percent$")
EVENT_FIELDS = ("timestamp", "duration", "k", "n")


@dataclass(frozen=True)
class Activity:
    """One throttling activity on one NeuronCore over the whole execution: its utilization limit and the share
    of the time it was in force, in percent."""

    activity: str
    nc: int
    util_limit_pct: float
    time_pct: float | None

    def as_dict(self) -> dict[str, str | int | float | None]:
        """As metrics.json's `throttling` list holds it."""
        return {
            "activity": self.activity,
            "nc": self.nc,
            "util_limit_pct": self.util_limit_pct,
            "time_pct": self.time_pct,
        }


@dataclass(frozen=True)
class WhileActive:
    """Throttling while TensorE was active, from the throttle events: the share of TensorE's active time under a
    limit below 1, and the share of its capacity in that time the limits took (sum of overlap x (1 - k/n) over
    TensorE's active time), both in percent; the lowest limit then."""

    throttled_time_pct: float
    lost_capacity_pct: float
    lowest_limit_pct: float | None


@dataclass(frozen=True)
class Throttling:
    """What the profile says of throttling, and where each part comes from (None: the profile cannot say)."""

    activities: tuple[Activity, ...]
    activities_source: str | None  # which table or fields the activities come from; None: none
    while_active: WhileActive | None
    while_active_why: str | None  # why there is no while_active


NO_EVENTS = (
    "the profile has no throttle events (parquet Throttle, legacy JSON ham) beside TensorE's ActiveTime, so "
    "throttling while TensorE was active cannot be told from throttling while it idled, which costs nothing"
)


def from_profile(summary: dict, db: ProfileTables | None, legacy: dict[str, list | None] | None = None) -> Throttling:
    """The throttling the profile records: the events against TensorE where the tables (`db`) or the legacy JSON's
    arrays (`legacy`: its `ham` and `active_time`) have them; the activities from ThrottleSummary where the
    profile has it, else from the summary's older fields."""
    frames, why = _events_from_db(db) if db is not None else (None, NO_EVENTS)
    ham, active_time = (legacy or {}).get("ham"), (legacy or {}).get("active_time")
    if frames is None and ham and active_time:
        frames, why = _events_from_legacy(ham, active_time)
    while_active, why = _while_active(*frames) if frames is not None else (None, why)
    activities, source = _from_throttle_summary(db, summary) if db is not None else ((), None)
    if source is None:
        activities, source = _from_summary_fields(summary)
    return Throttling(activities, source, while_active, why)


def _from_summary_fields(summary: dict) -> tuple[tuple[Activity, ...], str | None]:
    """The summary's throttle_<activity>_*_nc<i>_percent fields (fractions) as activities."""
    found: dict[tuple[str, str], dict] = {}
    for key, value in summary.items():
        match = SUMMARY_FIELD.match(str(key))
        if match and isinstance(value, int | float) and not isinstance(value, bool):
            activity, what, core = match.groups()
            found.setdefault((activity, core), {})[what] = 100 * value
    out = tuple(
        Activity(a, int(c), v["avg_util_limit"], v.get("active_time"))
        for (a, c), v in sorted(found.items())
        if "avg_util_limit" in v
    )
    return out, "the summary's throttle_<activity>_*_percent fields (neuron-profile's older output)" if out else None


def _from_throttle_summary(db: ProfileTables, summary: dict) -> tuple[tuple[Activity, ...], str | None]:
    """ThrottleSummary's rows per NeuronCore and throttle type ("all" aggregates them: left out). The limit is
    max_achievable_util_with_throttling_percent, a fraction (its description: 1.0 is no throttling); the time
    share is throttle_active_time_ns over the summary's total_time where both are known, else
    throttle_active_time_percent read as the summary's percent fields are, a fraction."""
    table = find_table(db, "ThrottleSummary")
    if table is None:
        return (), None
    have = columns(db, table)
    if not {"nc_idx", "throttle_type", "max_achievable_util_with_throttling_percent"} <= have:
        return (), None
    wanted = ["nc_idx", "throttle_type", "max_achievable_util_with_throttling_percent"]
    wanted += [c for c in ("throttle_active_time_ns", "throttle_active_time_percent") if c in have]
    rows = db.df(f'SELECT {", ".join(wanted)} FROM "{table}"')
    total = summary.get("total_time")
    out = []
    for r in rows.to_dict("records"):
        limit = r["max_achievable_util_with_throttling_percent"]
        if str(r["throttle_type"]).lower() == "all" or pd.isna(limit):
            continue
        ns, share = r.get("throttle_active_time_ns"), r.get("throttle_active_time_percent")
        time_pct = (
            100 * ns * 1e-9 / total
            if ns is not None and not pd.isna(ns) and isinstance(total, int | float) and total > 0
            else (100 * share if share is not None and not pd.isna(share) else None)
        )
        out.append(Activity(str(r["throttle_type"]), int(r["nc_idx"]), 100 * float(limit), time_pct))
    return tuple(sorted(out, key=lambda a: (a.nc, a.activity))), "the profile's ThrottleSummary table"


def _events_from_db(db: ProfileTables) -> tuple[tuple[pd.DataFrame, pd.DataFrame] | None, str | None]:
    """The throttle events (timestamp, duration, k, n, core) and TensorE's active intervals (start_ts, end_ts,
    core) of a parquet view: its Throttle and ActiveTime tables."""
    events, active = find_table(db, "Throttle"), find_table(db, "ActiveTime")
    if events is None or active is None:
        return None, NO_EVENTS
    lacking = [f"{events}.{c}" for c in EVENT_FIELDS if c not in columns(db, events)]
    lacking += [f"{active}.{c}" for c in ("start_ts", "end_ts", "engine") if c not in columns(db, active)]
    if lacking:
        return None, _lacking_why(lacking)
    core = {t: "coalesce(pcore_idx, 0)" if "pcore_idx" in columns(db, t) else "0" for t in (events, active)}
    thr = db.df(f'SELECT timestamp, duration, k, n, {core[events]} AS core FROM "{events}"')
    te = db.df(f"SELECT start_ts, end_ts, {core[active]} AS core FROM \"{active}\" WHERE lower(engine) = 'tensor'")
    return (thr, te), None


def _events_from_legacy(ham: list, active_time: list) -> tuple[tuple[pd.DataFrame, pd.DataFrame] | None, str | None]:
    """The same from a legacy full-profile JSON: its `ham` records (HAM notifications: k, n, type, duration,
    timestamp) and its `active_time` records (engine, start_ts, end_ts, pcore_idx)."""
    thr = pd.DataFrame([r for r in ham if isinstance(r, dict)])
    te = pd.DataFrame([r for r in active_time if isinstance(r, dict)])
    lacking = [f"ham.{c}" for c in EVENT_FIELDS if c not in thr] + [
        f"active_time.{c}" for c in ("start_ts", "end_ts", "engine") if c not in te
    ]
    if lacking:
        return None, _lacking_why(lacking)
    thr["core"] = thr["pcore_idx"].fillna(0) if "pcore_idx" in thr else 0
    te["core"] = te["pcore_idx"].fillna(0) if "pcore_idx" in te else 0
    numbers = [pd.to_numeric(thr[c], errors="coerce") for c in EVENT_FIELDS]
    thr = pd.DataFrame(dict(zip(EVENT_FIELDS, numbers)) | {"core": thr["core"]})
    te = te[te["engine"].astype(str).str.lower() == "tensor"]
    te = pd.DataFrame({c: pd.to_numeric(te[c], errors="coerce") for c in ("start_ts", "end_ts")} | {"core": te["core"]})
    return (thr.dropna(), te.dropna()), None


def _while_active(thr: pd.DataFrame, te: pd.DataFrame) -> tuple[WhileActive | None, str | None]:
    """The throttle events (a limit k/n over [timestamp, timestamp + duration)) against TensorE's active
    intervals, physical core by physical core."""
    thr = thr[thr["n"] > 0]
    te_total = throttled = lost = 0.0
    lowest = None
    for c, busy in te.groupby("core"):
        window = merge(busy["start_ts"], busy["end_ts"])
        te_total += float((window[1] - window[0]).sum())
        mine = thr[thr["core"] == c]
        start = mine["timestamp"].to_numpy(np.float64)
        overlap = inside_each(window, start, start + mine["duration"].to_numpy(np.float64))
        limit = mine["k"].to_numpy(np.float64) / mine["n"].to_numpy(np.float64)
        limited = (limit < 1) & (overlap > 0)
        throttled += float(overlap[limited].sum())
        lost += float((overlap * np.clip(1 - limit, 0, 1)).sum())
        if limited.any():
            lowest = min(100 * float(limit[limited].min()), lowest if lowest is not None else 100.0)
    if te_total <= 0:
        return None, "TensorE was never active in the profile: no throttling while it was active"
    return WhileActive(100 * throttled / te_total, 100 * lost / te_total, lowest), None


def _lacking_why(lacking: list[str]) -> str:
    return f"the profile's throttle events lack {', '.join(lacking)}, which throttling while TensorE was active reads"
