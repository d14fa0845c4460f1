"""DMA efficiency by descriptor size, as AWS's DMA efficiency investigation measures it (neuron-agentic-development,
neuron-nki-profile-querying/references/investigations/dma_efficiency.md): a transfer's descriptor is its bytes
over the SBUF partitions it spans (`transfer_bytes / partitions`: the write side's for a load into SBUF, the
read side's for a store out of it, the whole transfer where neither side is SBUF), and "transfers with
descriptor sizes below 4 KB are significantly less efficient". A transfer of 128 partitions x 1 KiB moves 128
KiB at once but in 1 KiB descriptors: the average bytes per transfer never sees it.

Read from the parquet `DmaPacketAggregated` table (read_num_sbuf_partitions, write_num_sbuf_partitions,
profile-schema-reference.rst), the kernel's transfers only (queue_type not `instruction`, more than 4 bytes, as
the bounds count them) and not DMA transposes (`is_transpose_mode`, which the investigation leaves out). The
table exists only where the capture had DGE notifications; the legacy JSON's DMA records carry no partition
count, so there the descriptor size is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis.profile_tables import ProfileTables, columns, find_table

SMALL_DESCRIPTOR_BYTES = 4096  # below this a descriptor is markedly less efficient (the investigation's threshold)
TABLE = "DmaPacketAggregated"
FIELDS = ("transfer_bytes", "queue_type", "queue_name", "read_num_sbuf_partitions", "write_num_sbuf_partitions")
QUEUES_NAMED = 3  # the queues moving the most bytes in small descriptors, by name


@dataclass(frozen=True)
class Descriptors:
    """The share of the kernel's DMA bytes moved in descriptors under 4 KiB, and the queues moving the most."""

    small_bytes_pct: float
    small_queues: tuple[str, ...]  # the top queues by bytes in small descriptors, largest first
    transfers: int  # the kernel's transfers counted


def descriptors(db: ProfileTables | None) -> tuple[Descriptors | None, str | None]:
    """(the descriptor figures, None), or (None, why the profile cannot give them)."""
    table = find_table(db, TABLE) if db is not None else None
    if db is None or table is None:
        return None, (
            "the profile has no DmaPacketAggregated table (the parquet view of a capture with DGE notifications), "
            "whose SBUF partition counts give a transfer's descriptor size; the legacy JSON's DMA records have none"
        )
    have = columns(db, table)
    lacking = [f for f in FIELDS if f not in have]
    if lacking:
        return (
            None,
            f"the profile's DmaPacketAggregated table has no {lacking[0]} column, which the descriptor size reads",
        )
    transpose = "AND coalesce(is_transpose_mode, FALSE) = FALSE" if "is_transpose_mode" in have else ""
    rows = db.df(
        f"""SELECT transfer_bytes AS bytes, coalesce(queue_name, '?') AS queue,
                   CASE WHEN coalesce(write_num_sbuf_partitions, 0) > 0 THEN transfer_bytes / write_num_sbuf_partitions
                        WHEN coalesce(read_num_sbuf_partitions, 0) > 0 THEN transfer_bytes / read_num_sbuf_partitions
                        ELSE transfer_bytes END AS descriptor
            FROM "{table}"
            WHERE coalesce(queue_type, '') <> 'instruction' AND transfer_bytes > 4 {transpose}"""
    )
    total = float(rows["bytes"].sum())
    if not total:
        return (
            None,
            "the profile's DmaPacketAggregated table has no kernel transfer (queue_type other than instruction)",
        )
    small = rows[rows["descriptor"] < SMALL_DESCRIPTOR_BYTES]
    by_queue = small.groupby("queue")["bytes"].sum().sort_values(ascending=False, kind="stable")
    return (
        Descriptors(
            small_bytes_pct=100 * float(small["bytes"].sum()) / total,
            small_queues=tuple(str(q) for q in by_queue.index[:QUEUES_NAMED]),
            transfers=len(rows),
        ),
        None,
    )
