"""The dtypes a sweep can name: bytes per element, and torch's attribute names (resolved lazily by the
framework code, so nothing here imports torch)."""

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
