"""A collective's size, world, algbw and busbw (nccl-tests' definitions, workloads/collective.py), the
link each rank is allowed (neuron: the target's, where the profiled workers span chips), its ranks'
spread (the straggler figure) and nccom-test's figures beside ours."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from neuronsweep.analysis.device_collectives import SOURCE, DeviceRanks
from neuronsweep.analysis.metrics.parts import Part, ratio
from neuronsweep.config.backends import BACKENDS, NO_LINK
from neuronsweep.host.targets import TARGETS
from neuronsweep.store.records import CaptureRecord
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import collective_of


@dataclass(kw_only=True)
class Collective(Part):
    """A collective's size and world, its algbw and busbw (nccl-tests' definitions), the link bandwidth each rank is
    allowed, and whether ranks outnumbered cores."""

    coll_op: str
    coll_world: int
    coll_bytes: int
    busbw_factor: float
    algbw_bytes_per_s: float | None
    busbw_bytes_per_s: float | None
    link_bytes_per_s: float | None
    coll_oversubscribed: bool | None


@dataclass(kw_only=True)
class RankSpread(Part):
    """The slowest and fastest rank's time and their ratio: the straggler figure."""

    rank_time_max_s: float | None
    rank_time_min_s: float | None
    rank_straggler_ratio: float | None


@dataclass(kw_only=True)
class RankWaits(Part):
    """The ranks on one timeline (analysis/rank_timeline.py): the largest wait of a rank for the last to
    arrive, the rank that arrived last most often, the share of the collectives' time spent waiting, the
    share overlapped by compute, and what is left of the clocks' difference after aligning them."""

    rank_wait_max_s: float | None
    straggler_rank: int | None
    collective_wait_pct: float | None
    collective_overlap_pct: float | None
    clock_residual_s: float | None


@dataclass(kw_only=True)
class ForwardAcrossRanks(Part):
    """A forward run across its ranks (workloads/forward.py): the layers it ran, its collective calls, and per
    execution the time its ranks spent inside the collectives, the part of it waiting for the last rank, and
    the rest of the forward (computing); each the ranks' mean, the median over executions."""

    forward_layers_run: int | None
    forward_collective_calls: int | None
    forward_collectives_s: float | None
    forward_wait_s: float | None
    forward_compute_s: float | None


@dataclass(kw_only=True)
class RanksProfiled(Part):
    """How many ranks' device profiles the view read (a multi-worker neuron capture)."""

    ranks_profiled: int


@dataclass(kw_only=True)
class NccomTest(Part):
    """Neuron's own benchmark of the same collective (nccom-test, run by the neuron capture)."""

    nccom_test_time_s: float | None
    nccom_test_algbw_bytes_per_s: float | None
    nccom_test_busbw_bytes_per_s: float | None
    busbw_vs_nccom_test: float | None


def collective(
    spec: Spec, capture: CaptureRecord | None, median_s: float | None, target: str | None, workers: list[dict] | None
) -> Collective:
    """`workers`: the profiled ranks' rows (neuron), which say on which chip each ran."""
    c = collective_of(spec)
    notes: dict[str, str] = {}
    link = None
    missing = BACKENDS[capture.backend].collective_link_missing if capture else NO_LINK
    if missing is None:
        link = _link_per_rank(target, workers, notes)
    else:
        notes["link_bytes_per_s"] = missing
    if median_s is None:
        notes["algbw_bytes_per_s"] = notes["busbw_bytes_per_s"] = "no latency was measured"
    crowded = capture.details.get("oversubscribed") if capture else None
    if crowded:
        notes["coll_oversubscribed"] = crowded
    bw = c.bandwidths(median_s)
    return Collective(
        coll_op=c.op,
        coll_world=c.world,
        coll_bytes=c.nbytes,
        busbw_factor=c.busbw_factor,
        algbw_bytes_per_s=bw["algbw_bytes_per_s"],
        busbw_bytes_per_s=bw["busbw_bytes_per_s"],
        link_bytes_per_s=link,
        coll_oversubscribed=None if capture is None else bool(crowded),
        notes=notes,
    )


def _link_per_rank(target: str | None, ranks: list[dict] | None, notes: dict[str, str]) -> float | None:
    """What NeuronLink allows each rank (busbw is a rank's figure, as in nccom-test): the chip's link
    bandwidth shared by the ranks on the busiest chip; null where the ranks never leave one chip (the
    profiles' nd_idx), or the target has no sourced figure."""
    chips = Counter(r["nd_idx"] for r in ranks or [] if r.get("nd_idx") is not None)
    known = TARGETS.get(target or "")
    if not chips:
        notes["link_bytes_per_s"] = "no rank's profile says which chip it ran on (nd_idx)"
    elif len(chips) == 1:
        notes["link_bytes_per_s"] = (
            f"every rank ran on chip {next(iter(chips))}: they exchange on the chip, and no sourced figure bounds that"
        )
    elif known is None or known.chip_link_bytes_per_s is None:
        notes["link_bytes_per_s"] = known.chip_link_source if known else f"the target {target!r} is not known"
    else:
        share = max(chips.values())
        notes["link_bytes_per_s"] = f"{known.chip_link_source}, shared by the {share} rank(s) on the busiest chip"
        return known.chip_link_bytes_per_s / share
    return None


def rank_latency(capture: CaptureRecord | None) -> list[dict]:
    """Each rank's own framework times: gloo's `ranks`, neuron's `rank_latency` (its `ranks` are the
    profiled workers' files)."""
    details = capture.details if capture else {}
    return [r for r in (details.get("rank_latency") or details.get("ranks") or []) if "median_s" in r]


def rank_waits(capture: CaptureRecord | None, device: DeviceRanks | None = None) -> RankWaits:
    """capture.json's `rank_timeline` (the gloo ranks' timed executions on one timeline), else the ranks' device
    profiles' collectives on one timeline (`device`: neuron), or null with why."""
    details = capture.details if capture else {}
    found = details.get("rank_timeline")
    if not found and device is not None and device.timeline is not None:
        return _device_waits(device, bool(details.get("profile_scope")))
    if not found:
        why = device.why if device is not None else None
        return RankWaits.null(
            why
            or details.get("rank_timeline_why")
            or "capture.json has no rank timeline (a capture of every rank's entries and exits)"
        )
    inside = (capture.details if capture else {}).get("forward_across_ranks")
    over = (
        f"over {found['instances']} collective calls ({found['instances'] // inside['collective_calls']} timed "
        "forwards, each after a barrier)"
        if inside
        else f"over {found['instances']} timed executions, each after a barrier"
    )
    notes = {
        "rank_wait_max_s": f"{over}; the ranks' clocks aligned on the collectives' exits (residual "
        f"{found['residual_s'] * 1e6:.1f} us)"
    }
    if inside is None:
        notes["collective_overlap_pct"] = "the case runs the collective alone: no compute to overlap it"
    else:
        notes["collective_overlap_pct"] = inside["overlap_why"]
    return RankWaits(
        rank_wait_max_s=found["rank_wait_max_s"],
        straggler_rank=found["straggler_rank"],
        collective_wait_pct=found["collective_wait_pct"],
        collective_overlap_pct=None,
        clock_residual_s=found["residual_s"],
        notes=notes,
    )


def _device_waits(device: DeviceRanks, session: bool) -> RankWaits:
    """The waits of the profiled execution's collectives (`session`: of every execution the runtime's inspect
    session profiled), from every rank's CcOp rows."""
    t = device.timeline
    assert t is not None  # rank_waits asked
    which = "every profiled execution (an inspect session)" if session else "the profiled execution"
    basis = (
        f"over the {len(t.arrivals_s)} collective operations of {which}, from {SOURCE}: a rank "
        f"arrives at its trigger; the clocks aligned on the operations' ends (residual {t.residual_s * 1e6:.1f} us)"
    )
    notes = {"rank_wait_max_s": "; ".join([basis, *device.notes])}
    if device.overlap_pct is None:
        notes["collective_overlap_pct"] = "a rank's profile has no ActiveTime table: when compute ran is not known"
    else:
        notes["collective_overlap_pct"] = (
            "the share of the ranks' time from trigger to end of each collective operation during which a compute "
            "engine of the same rank was active (ActiveTime)"
        )
    return RankWaits(
        rank_wait_max_s=t.rank_wait_max_s,
        straggler_rank=t.straggler_rank,
        collective_wait_pct=t.collective_wait_pct,
        collective_overlap_pct=device.overlap_pct,
        clock_residual_s=t.residual_s,
        notes=notes,
    )


def forward_across_ranks(
    capture: CaptureRecord | None, ranks: list[dict] | None = None, device: DeviceRanks | None = None
) -> ForwardAcrossRanks:
    """capture.json's `forward_across_ranks`, or null with why. Where the host could not time the collectives
    (neuron: they run inside the NEFF), each profiled rank's summary (`ranks`: tables/ranks.csv's rows) gives
    the time inside them: its cc_op_time in the profiled forward, the rest of its total_time computing; and
    the ranks' collective operations on one timeline (`device`) the part of it spent waiting."""
    found = (capture.details if capture else {}).get("forward_across_ranks")
    if not found:
        return ForwardAcrossRanks.null("capture.json has no forward across ranks (its capture recorded none)")
    values = {k: found[k] for k in ("collectives_s", "wait_s", "compute_s")}
    notes = dict.fromkeys(("forward_collectives_s", "forward_wait_s", "forward_compute_s"), found.get("why"))
    profiled = [r for r in ranks or [] if r.get("cc_op_time_s") is not None and r.get("total_time_s") is not None]
    one_execution = capture is not None and not capture.details.get("profile_scope")  # not an inspect session's
    if values["collectives_s"] is None and profiled and one_execution:
        values["collectives_s"] = statistics.fmean(r["cc_op_time_s"] for r in profiled)
        values["compute_s"] = statistics.fmean(r["total_time_s"] - r["cc_op_time_s"] for r in profiled)
        basis = (
            f"the profiled forward's device time, the mean over its {len(profiled)} ranks' profiles: the summary's "
            "cc_op_time (time in collective operations)"
        )
        notes["forward_collectives_s"] = basis
        notes["forward_compute_s"] = f"{basis} subtracted from its total_time"
        notes["forward_wait_s"] = (
            "a rank's summary gives its time in collective operations whole, and no rank's CcOp rows were put on "
            f"one timeline ({device.why if device is not None else 'no rank was viewed as parquet'})"
        )
        if device is not None and device.wait_s is not None:
            values["wait_s"] = device.wait_s
            notes["forward_wait_s"] = (
                f"the profiled forward's waits (each rank's: the last arrival at a collective operation minus its "
                f"own, summed over its operations), the mean over its ranks, from {SOURCE}"
            )
    return ForwardAcrossRanks(
        notes={k: v for k, v in notes.items() if v},
        forward_layers_run=found["layers_run"],
        forward_collective_calls=found["collective_calls"],
        forward_collectives_s=values["collectives_s"],
        forward_wait_s=values["wait_s"],
        forward_compute_s=values["compute_s"],
    )


def rank_spread(times: list[float], why_none: str | None = None) -> RankSpread:
    """`why_none`: the note each key gets (set even when other times fill them: the reason the
    framework's own per-rank times are missing)."""
    top, bottom = (max(times), min(times)) if times else (None, None)
    notes = dict.fromkeys(RankSpread.keys(), why_none) if why_none else {}
    return RankSpread(rank_time_max_s=top, rank_time_min_s=bottom, rank_straggler_ratio=ratio(top, bottom), notes=notes)


def nccom_test(capture: CaptureRecord | None, busbw: float | None) -> NccomTest:
    """nccom-test's figures for the same collective (run by the neuron capture) and how close our busbw comes to its
    busbw; null with the reason when it did not run."""
    anchor = capture.details.get("nccom_test") if capture else None
    row = (anchor or {}).get("result")
    if not row:
        why = (anchor or {}).get("why") or (
            "nccom-test is Neuron's collectives benchmark: it runs beside the neuron backend's collectives only"
        )
        return NccomTest.null(why)
    return NccomTest(
        nccom_test_time_s=row["time_s"],
        nccom_test_algbw_bytes_per_s=row["algbw_bytes_per_s"],
        nccom_test_busbw_bytes_per_s=row["busbw_bytes_per_s"],
        busbw_vs_nccom_test=ratio(busbw, row["busbw_bytes_per_s"]),
        notes={} if busbw is not None else {"busbw_vs_nccom_test": "no latency was measured"},
    )
