"""The profile summary's own figures in our units: times, engine and DMA activity, bytes moved, the
tool's MFU/MBU. Neuron summary `*_percent` fields are fractions 0..1; they become `_pct` (0..100) here,
once. A device counter on a backend without a device is null with that backend's reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from neuronsweep.analysis.engines import ENGINES
from neuronsweep.analysis.metrics.parts import Part
from neuronsweep.store.records import CaptureRecord

FRACTION_TO_PCT = 100.0


def _from(summary_field: str, scale: float = 1.0, device: bool = True) -> Any:
    """A key read from the summary's `summary_field`, times `scale`; `device`: a device counter."""
    return field(default=None, metadata={"summary": summary_field, "scale": scale, "device": device})


def _pct(summary_field: str) -> Any:
    return _from(summary_field, FRACTION_TO_PCT)


@dataclass(kw_only=True)
class ProfileCounters(Part):
    """What the profile summary says, key by key; the field's metadata names the summary field."""

    profile_total_time_s: float | None = _from("total_time", device=False)
    profile_active_time_s: float | None = _from("total_active_time", device=False)
    profile_active_pct: float | None = _from("total_active_time_percent", FRACTION_TO_PCT, device=False)
    profile_flops_tool: float | None = _from("model_flops", device=False)
    tensor_engine_active_time_s: float | None = _from("tensor_engine_active_time")
    vector_engine_active_time_s: float | None = _from("vector_engine_active_time")
    scalar_engine_active_time_s: float | None = _from("scalar_engine_active_time")
    gpsimd_engine_active_time_s: float | None = _from("gpsimd_engine_active_time")
    sync_engine_active_time_s: float | None = _from("sync_engine_active_time")
    tensor_engine_active_pct: float | None = _pct("tensor_engine_active_time_percent")
    vector_engine_active_pct: float | None = _pct("vector_engine_active_time_percent")
    scalar_engine_active_pct: float | None = _pct("scalar_engine_active_time_percent")
    gpsimd_engine_active_pct: float | None = _pct("gpsimd_engine_active_time_percent")
    sync_engine_active_pct: float | None = _pct("sync_engine_active_time_percent")
    dma_active_time_s: float | None = _from("dma_active_time")
    dma_active_pct: float | None = _pct("dma_active_time_percent")
    dma_transfer_bytes: float | None = _from("dma_transfer_total_bytes")
    hbm_read_bytes: float | None = _from("hbm_read_bytes")
    hbm_write_bytes: float | None = _from("hbm_write_bytes")
    sbuf_read_bytes: float | None = _from("sbuf_read_bytes")
    sbuf_write_bytes: float | None = _from("sbuf_write_bytes")
    psum_read_bytes: float | None = _from("psum_read_bytes")
    psum_write_bytes: float | None = _from("psum_write_bytes")
    spill_save_bytes: float | None = _from("spill_save_bytes")
    spill_reload_bytes: float | None = _from("spill_reload_bytes")
    mfu_tool_pct: float | None = _pct("mfu_estimated_percent")
    mbu_tool_pct: float | None = _pct("mbu_estimated_percent")

    def engine_times(self) -> dict[str, float | None]:
        """Each engine's and the DMA's active time in seconds: raw where the summary has it, else the
        tool's fraction of total_time (which is how it defines the fraction)."""
        total = self.profile_total_time_s
        times = {}
        for name in [f"{e}_engine" for e in ENGINES] + ["dma"]:
            raw, pct = getattr(self, f"{name}_active_time_s"), getattr(self, f"{name}_active_pct")
            times[name] = (
                raw if raw is not None else (pct / FRACTION_TO_PCT * total if pct is not None and total else None)
            )
        return times


DMA_METRICS = ("dma_active_time_s", "dma_active_pct", "dma_transfer_bytes")


def profile_counters(
    summary: dict,
    backend: str,
    invalid: dict[str, str],
    no_device_why: str | None,
    dma_packets: int | None,
    capture: CaptureRecord | None,
) -> ProfileCounters:
    """The summary's fields (`invalid`: field -> why the reader left it out), then the DMA evidence: an
    empty DMA table (or, without one in the view, the summary's dma_transfer_count of 0) makes the DMA
    figures null with the reason, never 0: without DGE notifications the runtime may record no DMA
    packets at all, or inaccurate ones."""
    values, notes = {}, {}
    for f in ProfileCounters.__dataclass_fields__.values():
        if f.name == "notes":
            continue
        value = summary.get(f.metadata["summary"])
        values[f.name] = None if value is None else value * f.metadata["scale"]
        if value is None:
            why = invalid.get(f.metadata["summary"]) or (no_device_why if f.metadata["device"] else None)
            notes[f.name] = why or f"the {backend} profile summary has no '{f.metadata['summary']}' field"
    dge = capture.details.get("dge_notifications") if capture else None
    if dma_packets == 0:
        why = "the profile's DMA table is empty" + (
            " (captured without DGE notifications: set neuron.enable_dge_notifs and capture again)"
            if dge is False
            else ""
        )
        for key in DMA_METRICS:
            values[key] = None
            notes[key] = why
    elif dge is False:
        for key in DMA_METRICS:
            notes.setdefault(key, "captured without DGE notifications: DMA figures may be inaccurate")
    return ProfileCounters(**values, notes=notes)
