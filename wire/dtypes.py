"""The dtypes a device's peak FLOP/s is known for, and their names: one vocabulary for the probe's MFU
(probe/flops.py) and ``ranktop launch --flops-dtype`` (cli/launch.py), which must not import the probe."""

from __future__ import annotations

from typing import Any

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
_ALIASES = {
    "float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "tfloat32": "tf32",
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8", "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
}  # fmt: skip


def normalise_dtype(dtype: Any) -> str:
    """ "bf16", torch.bfloat16 or "bfloat16" -> "bf16"; ValueError for a dtype with no peak."""
    name = str(dtype).replace("torch.", "").lower()
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} for peak FLOPs; one of {', '.join(DTYPES)}")
    return name
