"""The deployment that meets a latency target: TTFT, ITL and tokens per second per instance of every candidate
deployment of a model served by vLLM Neuron, from its measured graphs (suites/model-<name>-forward.csv).

For a prompt of P tokens and an output of O tokens, a candidate (tp, dp, EP, max_num_seqs B) serves:
- TTFT: the decode step in flight when the request arrives (one step at batch B: vLLM Neuron runs a prefill
  chunk or a decode batch per step, never both), then the prompt's prefill chunks, each the prefill graph of
  the smallest token bucket that holds it (chunks of min(max_num_batched_tokens, max_model_len) tokens); the
  last chunk samples the first token;
- ITL: the mean over the O decode steps of the decode graph at batch B, over the context bucket each step
  needs (the whole block table where no context buckets are set);
- tokens per second per instance: replicas per instance (its logical NeuronCores // (tp x dp) servers of
  dp replicas each) x B / ITL;
- fits: one rank's weights and the KV cache of B x (P + O) tokens within its core's HBM; the instance holds
  tp x dp cores; P + O within max_model_len.
These are sums of measured graphs (layers measured whole plus the measured collectives), not a served
request's timeline: queueing, the host's scheduling and sampling, and later prefill chunks' attention to
earlier ones (not in the measured prefill graph) are not in them. A workload mix (lists of prompt and
output lengths) takes each candidate's worst TTFT and ITL and its lowest throughput over the mix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from neuronsweep.config.suites import ModelEntry, SloEntry
from neuronsweep.errors import UserError
from neuronsweep.host.targets import INSTANCES, TARGETS, Instance
from neuronsweep.workloads import deployment, vllm_neuron
from neuronsweep.workloads.sharding import experts_key, rank_bytes
from neuronsweep.workloads.vllm_neuron import Serve, serves

# a graph's measured forward: (seconds or None, why not or what is noisy, "" when neither)
GraphTime = Callable[[str, int, int, str], tuple[float | None, str]]


@dataclass(frozen=True)
class Slo:
    """A latency target: TTFT and ITL in seconds, the requests' (prompt, output) lengths, the instance."""

    ttft_s: float
    itl_s: float
    mix: tuple[tuple[int, int], ...]
    instance: Instance

    @classmethod
    def of(cls, slo: SloEntry) -> Slo:
        """From the model entry's `slo:` (validated by the schema and the planner)."""
        prompts, outputs = slo["prompt_tokens"], slo["output_tokens"]
        prompts = prompts if isinstance(prompts, list) else [prompts]
        outputs = outputs if isinstance(outputs, list) else [outputs]
        if len(prompts) == 1 or len(outputs) == 1:
            mix = [(p, o) for p in prompts for o in outputs]
        else:
            mix = list(zip(prompts, outputs))
        return cls(slo["ttft_ms"] / 1e3, slo["itl_ms"] / 1e3, tuple(mix), INSTANCES[slo["instance"]])


def announce(entry: ModelEntry, where: str) -> str:
    """One line for the plan: the candidates a model entry's target is judged over, and on what."""
    slo = Slo.of(entry["slo"])
    names = ", ".join(label(serve) for serve in serves(entry["vllm"], where))
    return (
        f"model {entry['name']}: against TTFT {_ms(slo.ttft_s)} and ITL {_ms(slo.itl_s)} on a {slo.instance.name} "
        f"({slo.instance.cores()} NeuronCores), the deployments {names} (suites/model-{entry['name']}-deployments.csv)"
    )


def check(entry: ModelEntry, where: str) -> None:
    """An `slo:` the arithmetic can take, or one sentence before any job."""
    slo = entry["slo"]
    if "vllm" not in entry:
        raise UserError(f"{where}: slo needs vllm: its candidates are vLLM Neuron deployments (your serve lines).")
    if slo["instance"] not in INSTANCES:
        raise UserError(
            f"{where}: slo.instance {slo['instance']} is not an instance size neuron-sweep knows; give one of "
            f"{', '.join(INSTANCES)}."
        )
    lengths = [len(v) for v in (slo["prompt_tokens"], slo["output_tokens"]) if isinstance(v, list)]
    if len(lengths) == 2 and len(set(lengths)) > 1 and min(lengths) > 1:
        raise UserError(
            f"{where}: slo.prompt_tokens and output_tokens are lists of {lengths[0]} and {lengths[1]}: a mix pairs "
            "them, so give lists of one length (or one of them a single number)."
        )
    if set(entry.get("phases", ("prefill", "decode"))) != {"prefill", "decode"}:
        raise UserError(f"{where}: slo needs both phases measured (phases: [prefill, decode]).")


@dataclass(frozen=True)
class Served:
    """One candidate at one (prompt, output): its figures, what binds it, what they are made of."""

    ttft_s: float | None
    itl_s: float | None
    tokens_per_s: float | None
    blocked: str | None  # the constraint it cannot meet at all (cores, max_model_len, HBM), else None
    made_of: str
    caveat: str


def label(serve: Serve) -> str:
    """A candidate's name: tp2-seqs4, tp4-dp2-ep8-seqs8."""
    extra = (f"-dp{serve.dp}" if serve.dp > 1 else "") + (f"-ep{serve.ep}" if serve.ep > 1 else "")
    return f"tp{serve.tp}{extra}-seqs{serve.max_num_seqs}"


def _bucket(buckets: tuple[int, ...], tokens: int) -> int | None:
    return next((b for b in buckets if b >= tokens), None)


def serve_one(serve: Serve, tag: str, prompt: int, output: int, slo: Slo, graph: GraphTime, need_bytes: int) -> Served:
    """The candidate `serve` (whose graphs' layout tag is `tag`) serving one request of `prompt` + `output`."""
    cores = slo.instance.cores()
    hbm = TARGETS[slo.instance.family].hbm_bytes()
    if serve.tp * serve.dp > cores:
        return Served(None, None, None, "cores", f"tp x dp = {serve.tp * serve.dp} > {cores} cores", "")
    if prompt + output > serve.max_model_len:
        why = f"prompt + output {prompt + output} > max_model_len {serve.max_model_len}"
        return Served(None, None, None, "max_model_len", why, "")
    if need_bytes > hbm:
        why = f"weights and KV cache {need_bytes / 2**30:.1f} GiB > {hbm / 2**30:.0f} GiB of a core's HBM"
        return Served(None, None, None, "HBM", why, "")
    batch, chunk = serve.max_num_seqs, serve.token_buckets[-1]
    chunks = [chunk] * (prompt // chunk) + ([prompt % chunk] if prompt % chunk else [])
    prefill = [("prefill", 1, _bucket(serve.token_buckets, c) or chunk) for c in chunks]
    steps = [("decode", batch, _bucket(serve.contexts, prompt + i + 1) or serve.contexts[-1]) for i in range(output)]
    parts: dict[tuple[str, int, int], tuple[float | None, str]] = {g: graph(*g, tag) for g in {*prefill, *steps}}
    missing = sorted({f"{p} b{b} s{s}: {why}" for (p, b, s), (t, why) in parts.items() if t is None})
    noisy = sorted({f"{p} b{b} s{s}" for (p, b, s), (t, why) in parts.items() if t is not None and why})
    made = _made_of(prefill, steps)
    if missing:
        return Served(None, None, None, None, made, "not measured: " + "; ".join(missing))
    itl = sum(parts[g][0] or 0.0 for g in steps) / max(1, len(steps))
    ttft = (parts[steps[0]][0] or 0.0) + sum(parts[g][0] or 0.0 for g in prefill)
    replicas = cores // (serve.tp * serve.dp) * serve.dp
    caveat = f"built from noisy graphs: {', '.join(noisy)}" if noisy else ""
    return Served(ttft, itl, replicas * batch / itl if itl else None, None, made, caveat)


def _made_of(prefill: list, steps: list) -> str:
    counted = pd.Series([f"{p} b{b} s{s}" for p, b, s in prefill]).value_counts(sort=False)
    decoded = pd.Series([f"{p} b{b} s{s}" for p, b, s in steps]).value_counts(sort=False)
    first = f"{steps[0][0]} b{steps[0][1]} s{steps[0][2]}" if steps else ""
    return (
        f"TTFT: {first} (in flight) + "
        + " + ".join(f"{n} x {g}" for g, n in counted.items())
        + "; ITL: mean of "
        + " + ".join(f"{n} x {g}" for g, n in decoded.items())
    )


def table(entry: ModelEntry, config: dict, forward: pd.DataFrame, where: str) -> pd.DataFrame:
    """One row per candidate deployment of a model entry with `slo` (and `vllm`): its figures over the
    mix, whether it meets the target, what binds it, and the chosen one (the most tokens per second per
    instance of those that meet it). `config`: the model's config.json fields."""
    slo = Slo.of(entry["slo"])
    candidates = serves(entry["vllm"], where)
    dtype = candidates[0].dtype or entry["dtype"][0]  # a serve line's --dtype is what the graphs ran in
    moe = experts_key(config) is not None
    graph = _lookup(forward, dtype)
    rows = []
    for serve in candidates:
        layout = vllm_neuron.sharding(serve)
        rank = deployment.rank_config(config, layout, "decode", where)
        tag = layout.label("decode", moe) if rank.fields or layout.dp > 1 else ""  # as the planner tags ids
        results = [
            serve_one(
                serve, tag, p, o, slo, graph, rank_bytes(config, rank, dtype, serve.max_num_seqs, p + o, serve.kv_bytes)
            )
            for p, o in slo.mix
        ]
        rows.append(_row(label(serve), serve, results, slo))
    return _choose(pd.DataFrame(rows))


def _lookup(forward: pd.DataFrame, dtype: str) -> GraphTime:
    """A graph's forward time from suites/<model>-forward.csv, or None and why."""
    index: dict[tuple[str, int, int, str], tuple[float | None, str]] = {}
    rows = forward[forward["dtype"].astype(str) == dtype] if "dtype" in forward else forward.iloc[:0]
    for _, r in rows.iterrows():
        tag = "" if pd.isna(r.get("layout")) else str(r.get("layout"))
        value = None if pd.isna(r["forward_time_s"]) else float(r["forward_time_s"])
        why = "" if pd.isna(r.get("forward_why")) else str(r["forward_why"])
        index[(str(r["phase"]), int(r["batch"]), int(r["seq"]), tag)] = (value, why or ("" if value else "no estimate"))

    def graph(phase: str, batch: int, seq: int, tag: str) -> tuple[float | None, str]:
        return index.get((phase, batch, seq, tag), (None, "not in the run"))

    return graph


def _row(name: str, serve: Serve, results: list[Served], slo: Slo) -> dict:
    blocked = next((r for r in results if r.blocked), None)
    unknown = next((r for r in results if not r.blocked and r.itl_s is None), None)
    row = {
        "candidate": name,
        "tp": serve.tp,
        "dp": serve.dp,
        "ep": serve.ep,
        "max_num_seqs": serve.max_num_seqs,
        "instance": slo.instance.name,
        "cores": serve.tp * serve.dp,
        "ttft_target_s": slo.ttft_s,
        "itl_target_s": slo.itl_s,
        "ttft_s": None,
        "itl_s": None,
        "tokens_per_s_per_instance": None,
        "meets_slo": False,
        "binding": None,
        "made_of": "; ".join(dict.fromkeys(r.made_of for r in results)),
        "caveat": "; ".join(dict.fromkeys(r.caveat for r in results if r.caveat)),
    }
    if blocked:
        return row | {"binding": blocked.blocked, "caveat": blocked.made_of}
    if unknown:
        return row | {"binding": "unmeasured", "caveat": unknown.caveat}
    ttft = max(r.ttft_s or 0.0 for r in results)
    itl = max(r.itl_s or 0.0 for r in results)
    tps = min(r.tokens_per_s or 0.0 for r in results)
    ratios = {"TTFT": ttft / slo.ttft_s, "ITL": itl / slo.itl_s}
    tightest = max(ratios, key=lambda k: ratios[k])
    return row | {
        "ttft_s": ttft,
        "itl_s": itl,
        "tokens_per_s_per_instance": tps,
        "meets_slo": all(v <= 1 for v in ratios.values()),
        "binding": tightest,
        "slo_ratio": ratios[tightest],  # the binding figure over its target: above 1 misses
    }


def _choose(rows: pd.DataFrame) -> pd.DataFrame:
    """`chosen` true on the candidate that meets the target with the most tokens per second per instance
    (ties: fewer cores); none where none meets it."""
    rows["chosen"] = False
    meets = rows[rows["meets_slo"]]
    if len(meets):
        best = meets.sort_values(["tokens_per_s_per_instance", "cores"], ascending=[False, True]).index[0]
        rows.loc[best, "chosen"] = True
    return rows


def verdict(rows: pd.DataFrame) -> str:
    """One sentence: the chosen deployment and its figures, or the closest and what binds it."""
    if rows["chosen"].any():
        r = rows[rows["chosen"]].iloc[0]
        return (
            f"{r['candidate']} meets TTFT {r['ttft_target_s'] * 1e3:g} ms and ITL {r['itl_target_s'] * 1e3:g} ms "
            f"with the most tokens per second per {r['instance']}: {r['tokens_per_s_per_instance']:,.0f} (TTFT "
            f"{_ms(r['ttft_s'])}, ITL {_ms(r['itl_s'])}; {r['binding']} binds)."
        )
    measured = rows[rows["slo_ratio"].notna()] if "slo_ratio" in rows else rows.iloc[:0]
    if not len(measured):
        return "No candidate meets the target: " + "; ".join(f"{r.candidate}: {r.binding}" for r in rows.itertuples())
    r = measured.sort_values("slo_ratio").iloc[0]
    return (
        f"No candidate meets the target; the closest is {r['candidate']}, whose {r['binding']} is "
        f"{r['slo_ratio']:.2f}x its target (TTFT {_ms(r['ttft_s'])}, ITL {_ms(r['itl_s'])})."
    )


def _ms(seconds: float) -> str:
    """Milliseconds as a reader reads them: 1,389 ms, 12.5 ms."""
    ms = seconds * 1e3
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"
