"""Where a layer's time goes: every op of a measured layer (workloads/layer.py) in one category, from what
the op is and which module of the model ran it. The categories, in the order the report stacks them:

  gemm         the projections and MLP/expert GEMMs (a Linear, a grouped expert GEMM)
  attention    scores, mask, softmax and the weighted sum (the attention module's own ops)
  norm         RMSNorm / LayerNorm
  elementwise  activations and the other elementwise ops (residual adds, the gate x up product)
  rope         the rotary embedding (its cos/sin and their application)
  moe_routing  the router's GEMM, its softmax and top-k, and the permute/unpermute around the experts
  collectives  communication ops
  other        what none of these claims; and of a layer's measured time, what no op covers

The rules read names only (an op's name, its module's path and class, the source line that called it), so
they are the same for torch.export's nodes (cpu) and, later, an HLO op's metadata (xla, neuron).
"""

from __future__ import annotations

CATEGORIES = ("gemm", "attention", "norm", "elementwise", "rope", "moe_routing", "collectives", "other")
GEMM_OPS = {"linear", "mm", "addmm", "matmul", "bmm", "baddbmm", "einsum", "_grouped_mm", "grouped_mm_fallback"}
ATTENTION_OPS = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention", "softmax", "_softmax"}
ACTIVATION_OPS = {"silu", "gelu", "relu", "tanh", "sigmoid", "gelu_tanh", "softplus"}
ELEMENTWISE_OPS = {"add", "mul", "sub", "div", "add_", "mul_", "neg", "exp", "pow", "rsqrt"}
COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d", "c10d_functional")


def categorize(op: str, module_path: str, module_class: str, source: str = "") -> str:
    """The category of one op: `op` its name (aten's linear, or namespace::name), `module_path` and
    `module_class` the innermost module that ran it, `source` the Python line(s) that called it."""
    namespace, _, name = op.rpartition("::") if "::" in op else ("", "", op)
    leaf = module_path.rpartition(".")[2]
    text = source.lower()
    if namespace in COLLECTIVE_NAMESPACES or name.startswith(("all_reduce", "all_gather", "reduce_scatter")):
        return "collectives"
    if "rotary" in module_class.lower() or "rotary" in text or "rope" in text:
        return "rope"
    if "norm" in module_class.lower() or name.endswith("norm"):  # or native_layer_norm, rms_norm by name
        return "norm"
    if "router" in module_class.lower() or (leaf in ("gate", "router") and name in GEMM_OPS):
        return "moe_routing"
    if name in GEMM_OPS:  # a projection's, an MLP's or the experts' GEMM; attention's own are its scores and sum
        return "attention" if "attention" in module_class.lower() else "gemm"
    if module_class == "Linear":  # xla: the weight's transpose and the bias a Linear lowers to beside its dot
        return "gemm"
    if "attention" in module_class.lower() or name in ATTENTION_OPS or "mask" in text:
        return "attention"
    if name in ACTIVATION_OPS or name in ELEMENTWISE_OPS or "activation" in module_class.lower():
        return "elementwise"
    if _moe_block(module_class):
        return "moe_routing"  # around the experts' GEMMs: sort, gather, count, scatter back
    return "other"


def _moe_block(module_class: str) -> bool:
    """An experts module or the block around them (Qwen3MoeSparseMoeBlock, DeepseekV3MoE, Llama4TextMoe),
    not a family's dense MLP whose name says MoE (Qwen3MoeMLP)."""
    name = module_class.lower()
    return "expert" in name or "sparse" in name or name.endswith(("moe", "moeblock"))


def is_gemm_op(op: str) -> bool:
    """Whether the op is a GEMM (of any category: a projection, attention's scores, the router)."""
    return op.rpartition("::")[2] in GEMM_OPS
