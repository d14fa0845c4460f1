"""How many tokens each expert of a mixture-of-experts layer gets: a stated policy, since a model traced
under fake tensors has no router outputs to read (suites.model `routing`, docs/your-code.md).

Every token picks `top_k` distinct experts, so a forward of T tokens hands out T x top_k token slots and
no expert gets more than T. The policies:

- `balanced` (the default): T x top_k / E each, the remainder spread one each over the first experts;
- `{zipf: s}`: expert i (busiest first) gets a share proportional to 1 / i^s, a skewed load as routers
  drift to; s > 0, larger is more skewed;
- `{counts: FILE}`: the shares of a load you measured (one count per expert, in any order: listed busiest
  first), scaled to this forward's T x top_k.

Shares become whole tokens by the largest remainder, capped at T with the excess passed on to the next
busiest, so the counts always add up to T x top_k.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from neuronsweep.errors import UserError

Policy = Any  # "balanced", {zipf: s}, or {counts: [...] | file}: the config's routing (code branches on which)


def label(policy: Policy) -> str:
    """The policy as scenario ids carry it: balanced, zipf1.2, counts."""
    if policy == "balanced":
        return "balanced"
    if "zipf" in policy:
        return f"zipf{policy['zipf']:g}"
    return "counts"


def read_counts(path: Path, where: str) -> list[int]:
    """A measured load: a JSON list of token counts per expert, or integers separated by commas or white
    space; each a whole number of 0 or more, at least one above 0."""
    try:
        text = path.read_text()
    except OSError:
        raise UserError(
            f"{where}: routing.counts: no such file {path}; give a path relative to the config file."
        ) from None
    try:
        values = json.loads(text) if text.lstrip().startswith("[") else text.replace(",", " ").split()
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{where}: routing.counts: {path} is not a JSON list ({exc.msg}); write [n1, n2, ...]."
        ) from None
    counts = []
    for value in values if isinstance(values, list) else [values]:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not (math.isfinite(number) and number >= 0 and number == int(number)):
            raise UserError(
                f"{where}: routing.counts: {path} holds {value!r}, not a whole number of tokens of 0 or more; "
                "give one count per expert."
            )
        counts.append(int(number))
    if not counts or not any(counts):
        raise UserError(f"{where}: routing.counts: {path} holds no token counts above 0; give one count per expert.")
    return counts


def tokens_per_expert(policy: Policy, tokens: int, top_k: int, experts: int, where: str = "suites.model") -> list[int]:
    """Tokens each expert gets in one forward of `tokens` tokens, busiest first; they add up to
    tokens x top_k (`policy`: "balanced", {"zipf": s} or {"counts": [n, ...], "file": where they came from}
    as read_counts gives)."""
    slots = tokens * top_k
    if policy == "balanced":
        base, extra = divmod(slots, experts)
        return [base + (1 if i < extra else 0) for i in range(experts)]
    if "zipf" in policy:
        weights = [1 / (i + 1) ** policy["zipf"] for i in range(experts)]
    else:
        weights = sorted(policy["counts"], reverse=True)
        if len(weights) != experts:
            raise UserError(
                f"{where}: routing.counts: {policy.get('file', 'the file')} holds {len(weights)} counts, and the "
                f"model has {experts} experts per MoE layer; give one count per expert."
            )
    return _whole(weights, slots, cap=tokens)


def rank_share(
    policy: Policy, tokens: int, top_k: int, experts: int, ep: int = 1, where: str = "suites.model"
) -> list[int]:
    """The tokens of the `experts` a rank holds under expert parallelism `ep` (experts x ep in all): every
    token is gathered onto every rank, so they are the first `experts` of the loads over all of them, the
    busiest rank's, which the layer waits for (tokens_per_expert's order)."""
    return tokens_per_expert(policy, tokens, top_k, experts * ep, where)[:experts]


def _whole(weights: list[float], total: int, cap: int) -> list[int]:
    """`total` split in proportion to `weights` as whole numbers (largest remainder), none above `cap`:
    what a capped expert cannot take goes to the others in proportion."""
    out = [0] * len(weights)
    free = [i for i, w in enumerate(weights) if w > 0]
    left = total
    while left > 0 and free:
        scale = sum(weights[i] for i in free)
        exact = {i: left * weights[i] / scale for i in free}
        share = {i: min(cap - out[i], math.floor(exact[i])) for i in free}
        rest = left - sum(share.values())
        for i in sorted(free, key=lambda i: (-(exact[i] - math.floor(exact[i])), i)):  # largest remainder first
            if rest and out[i] + share[i] < cap:
                share[i] += 1
                rest -= 1
        for i in free:
            out[i] += share[i]
        left = total - sum(out)
        free = [i for i in free if out[i] < cap]
    return sorted(out, reverse=True)


def assignment(load: list[int], tokens: int, top_k: int) -> list[list[int]]:
    """The experts each token goes to, so that expert i gets load[i] tokens: `tokens` rows of `top_k`
    distinct experts. The slots, ordered by expert, fill the columns one after another; an expert has
    at most `tokens` slots (tokens_per_expert caps it), so its run never reaches a row twice."""
    if sum(load) != tokens * top_k or max(load, default=0) > tokens:
        raise ValueError(
            f"a load of {sum(load)} slots, at most {max(load, default=0)} an expert, for {tokens} x {top_k}"
        )
    slots = [expert for expert, count in enumerate(load) for _ in range(count)]
    return [[slots[j * tokens + t] for j in range(top_k)] for t in range(tokens)]
