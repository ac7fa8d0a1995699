"""The work in one training step, for throughput and MFU: samples, tokens and FLOPs per step, and the device's peak.

The user says what a step is (``probe.init(batch_size=..., tokens_per_step=...,
flops_per_step=...)`` or the ``RANKTOP_BATCH_SIZE`` / ``RANKTOP_TOKENS_PER_STEP``
/ ``RANKTOP_FLOPS_PER_STEP`` environment variables, which ``ranktop launch``
sets); all three are *per rank*. FLOPs can instead be counted once by PyTorch's
own counter: :func:`count_flops` runs a function (one forward and backward)
under ``torch.utils.flop_counter.FlopCounterMode``. The TUI multiplies each by
the rank's step rate.

Peak FLOP/s comes from :data:`PEAK_TFLOPS` (dense, no sparsity, from the
vendors' data sheets) by device name and dtype: the one the user names
(``flops_dtype``, ``RANKTOP_FLOPS_DTYPE``, ``ranktop launch --flops-dtype``),
else the one the job computes in, learnt in automatic mode inside its first
training forward (:func:`compute_dtype`: autocast's, else the parameters'),
else bf16 (the usual basis of MFU); ``RANKTOP_PEAK_TFLOPS`` overrides it. Where
none is known (a CPU) the TUI shows the achieved TFLOP/s and says MFU is
unknown. Everything here is computed on the sender thread or at ``init``;
torch is only used if the script imported it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, Mapping

from ranktop.wire import settings
from ranktop.wire.dtypes import normalise_dtype

#: Dense peak TFLOP/s per device and dtype. Keys are matched against the lower-cased CUDA
#: device name, most specific first (so "h100 pcie" wins over "h100").
PEAK_TFLOPS: tuple[tuple[tuple[str, ...], dict[str, float]], ...] = (
    (("gh200",), {"fp64": 67.0, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    (("h200", "nvl"), {"fp64": 30.0, "fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}),
    (("h200",), {"fp64": 67.0, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    (("h100", "nvl"), {"fp64": 60.0, "fp32": 60.0, "tf32": 417.5, "bf16": 835.0, "fp16": 835.0, "fp8": 1670.0}),
    (("h100", "pcie"), {"fp64": 51.0, "fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}),
    (("h100",), {"fp64": 67.0, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),  # SXM
    (("h800", "pcie"), {"fp64": 0.8, "fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}),
    (("h800",), {"fp64": 1.0, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    (("b200",), {"fp64": 40.0, "fp32": 80.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0}),
    (("a100",), {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),  # 40 and 80 GB, SXM and PCIe
    (("a800",), {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    (("l40s",), {"fp32": 91.6, "tf32": 183.0, "bf16": 362.1, "fp16": 362.1, "fp8": 733.0}),
    (("l40",), {"fp32": 90.5, "tf32": 90.5, "bf16": 181.0, "fp16": 181.0, "fp8": 362.0}),
    (("l4",), {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}),
    (("a10g",), {"fp32": 31.2, "tf32": 35.0, "bf16": 70.0, "fp16": 70.0}),
    (("a10",), {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}),
    (("a6000",), {"fp32": 38.7, "tf32": 77.4, "bf16": 154.8, "fp16": 154.8}),
    (("v100", "pcie"), {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}),
    (("v100",), {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}),  # SXM2
    (("t4",), {"fp32": 8.1, "fp16": 65.0}),
    (("mi300x",), {"fp64": 81.7, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}),
    (("mi250x",), {"fp64": 95.7, "fp32": 95.7, "bf16": 383.0, "fp16": 383.0}),
)

ENV_BATCH = settings.BATCH_SIZE.name
ENV_TOKENS = settings.TOKENS_PER_STEP.name
ENV_FLOPS = settings.FLOPS_PER_STEP.name
ENV_PEAK = settings.PEAK_TFLOPS.name
ENV_DTYPE = settings.FLOPS_DTYPE.name
#: The peak's dtype until the job's is known: bf16, the usual basis of MFU.
DEFAULT_DTYPE = "bf16"
#: Where the peak's dtype came from (``dtype_from`` of the work map): the user, autocast, the parameters, or none.
STATED, AUTOCAST, PARAMETERS, DEFAULT = "stated", "autocast", "parameters", "default"


#: A MIG slice's name ends "MIG <n>g.<mem>gb": n of the GPU's :data:`MIG_SLICES` compute slices.
_MIG = re.compile(r"\bmig (\d+)g\.")
MIG_SLICES = 7  # A100, H100, H200, H800: 7 GPU compute slices (a 7g slice is the whole GPU)


def peak_tflops(device_name: str, dtype: str = "bf16") -> float | None:
    """Dense peak TFLOP/s of a device by its name (e.g. ``NVIDIA H100 80GB HBM3``), or None if unknown.

    A MIG slice (``NVIDIA H100 80GB HBM3 MIG 3g.40gb``) gets its share of the GPU's peak (3/7 here)."""
    name = device_name.lower()
    for words, peaks in PEAK_TFLOPS:
        if all(word in name for word in words):
            peak = peaks.get(dtype)
            mig = _MIG.search(name)
            if peak is not None and mig is not None:
                peak *= min(int(mig.group(1)), MIG_SLICES) / MIG_SLICES
            return peak
    return None


def positive(name: str, value: Any, kind: type[float] | type[int] = float) -> Any:
    if value is None:
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not number > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return number


def work_from(
    batch_size: Any = None,
    tokens_per_step: Any = None,
    flops_per_step: Any = None,
    flops_dtype: Any = None,
    env: Mapping[str, str] = os.environ,
) -> dict[str, Any]:
    """The ``work`` map of a rank's hello: arguments first, then the environment variables.

    ``flops_per_step="auto"`` is accepted here and means "counted later" (see :func:`count_flops`).
    ``dtype`` is the one the peak is taken for: ``flops_dtype`` (or ``RANKTOP_FLOPS_DTYPE``) when stated
    (``dtype_from`` "stated"), else bf16 until the job's own is learnt (:func:`compute_dtype`; "default").
    """
    if flops_per_step == "auto":
        flops_per_step = None
    batch = positive("batch_size", batch_size, int) if batch_size is not None else _from_env(env, ENV_BATCH, int)
    tokens = positive("tokens_per_step", tokens_per_step, int) if tokens_per_step is not None else _from_env(env, ENV_TOKENS, int)
    flops = positive("flops_per_step", flops_per_step) if flops_per_step is not None else _from_env(env, ENV_FLOPS, float)
    peak = _from_env(env, ENV_PEAK, float)
    stated = normalise_dtype(flops_dtype) if flops_dtype else _dtype_from_env(env)
    work: dict[str, Any] = {"dtype": stated or DEFAULT_DTYPE, "dtype_from": STATED if stated else DEFAULT}
    for key, value in (("batch", batch), ("tokens", tokens), ("flops", flops), ("peak_tflops", peak)):
        if value is not None:
            work[key] = value
    return work


def _dtype_from_env(env: Mapping[str, str]) -> str | None:
    text = env.get(ENV_DTYPE, "")
    if not text:
        return None
    try:
        return normalise_dtype(text)
    except ValueError as exc:
        print(f"ranktop: ignoring {ENV_DTYPE}: {exc}", file=sys.stderr)
        return None


def compute_dtype(torch: Any, module: Any) -> tuple[str, str] | None:
    """(dtype, where it was learnt) of what a training forward of ``module`` computes in, asked inside it:
    autocast's dtype where autocast is on for the parameters' device ("autocast"), else the parameters' own
    ("parameters"; FSDP2's mixed-precision ``param_dtype`` for a ``fully_shard`` module), fp32 counted as tf32 where
    CUDA matmuls may use TF32 (``torch.backends.cuda.matmul.allow_tf32``, ``set_float32_matmul_precision("high")``). None: no
    floating-point parameter, or a torch that cannot say."""
    try:
        param = next(iter(module.parameters()), None)
        if param is None:
            return None
        device = param.device.type
        if torch.is_autocast_enabled(device):
            return normalise_dtype(torch.get_autocast_dtype(device)), AUTOCAST
        name = normalise_dtype(_fsdp2_param_dtype(module) or param.dtype)
        if name == "fp32" and device == "cuda" and _tf32(torch):
            name = "tf32"
        return name, PARAMETERS
    except Exception:
        return None


def autocast_dtype(torch: Any) -> str | None:
    """Autocast's dtype where autocast is on now (CUDA's first, then the CPU's), else None: what ``probe.init()``
    mode, which knows no model, asks where the script enters its forward phase."""
    try:
        for device in ("cuda", "cpu"):
            if torch.is_autocast_enabled(device):
                return normalise_dtype(torch.get_autocast_dtype(device))
    except Exception:
        pass
    return None


def _fsdp2_param_dtype(module: Any) -> Any:
    """FSDP2's ``MixedPrecisionPolicy(param_dtype=...)`` of a ``fully_shard`` module, or None: its sharded
    parameters keep their own dtype, and it unshards them in this one (after our hook has run)."""
    try:
        for part in module.modules():  # the root, else its first block that has parameters of its own (per block)
            get = getattr(part, "_get_fsdp_state", None)
            group = get()._fsdp_param_group if get is not None else None
            if group is not None:
                return group.mp_policy.param_dtype
    except Exception:
        pass
    return None


def _tf32(torch: Any) -> bool:
    try:
        if torch.get_float32_matmul_precision() != "highest":
            return True
        return bool(torch.backends.cuda.matmul.allow_tf32)
    except Exception:
        return False


def _from_env(env: Mapping[str, str], name: str, kind: type[float] | type[int]) -> Any:
    """A positive number from the environment; a bad value is reported and ignored (``ranktop launch``
    starts the probe from a start-up hook, where raising would break the user's script)."""
    text = env.get(name, "")
    if not text:
        return None
    try:
        return positive(name, float(text) if kind is int and "e" in text.lower() else text, kind)
    except ValueError as exc:
        print(f"ranktop: ignoring {name}: {exc}", file=sys.stderr)
        return None


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """FLOPs of one call of ``fn`` (typically one forward and backward), by PyTorch's own counter.

    ``fn`` really runs: call it on a batch before training (and zero the gradients
    after), or on the first real step. Returns the total PyTorch's
    ``FlopCounterMode`` counts (matrix multiplies, convolutions, attention).
    """
    from torch.utils.flop_counter import (
        FlopCounterMode,  # the script's torch; the probe never needs it otherwise
    )

    counter = FlopCounterMode(display=False)
    with counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


def device_peak(work: dict[str, Any], device_name: str | None) -> float | None:
    """The peak TFLOP/s to divide by: the override, else the table's, else None."""
    if "peak_tflops" in work:
        return float(work["peak_tflops"])
    if not device_name:
        return None
    return peak_tflops(device_name, work.get("dtype", "bf16"))


def cuda_device_name(device: int | None) -> str | None:
    """The name of a CUDA device, if the script's torch has CUDA initialised."""
    torch = sys.modules.get("torch")
    if torch is None or device is None:
        return None
    try:
        if torch.cuda.is_initialized():
            return str(torch.cuda.get_device_name(device))
    except Exception:
        pass
    return None


def with_device(work: dict[str, Any], device_name: str | None) -> dict[str, Any]:
    """``work`` plus the device's name and its peak TFLOP/s (when the table or the override knows it)."""
    out = dict(work)
    if device_name:
        out["device"] = device_name
    peak = device_peak(work, device_name)
    if peak is not None:
        out["peak_tflops"] = peak
    return out
