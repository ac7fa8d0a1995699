"""FLOPs of one training step of the demo model, counted by PyTorch and by hand.

:func:`step_flops` runs one forward and backward of a :class:`~ranktop.demo.model.TinyLM`
under PyTorch's own counter (``torch.utils.flop_counter.FlopCounterMode``) on
the *meta* device: shapes only, no memory, no compute, and the real model's
gradients are never touched. Meta also takes the math path of
``scaled_dot_product_attention`` (batched matrix multiplies the counter
knows), where the CPU's fused attention kernel would be left out of the count.

:func:`analytic_step_flops` is the same number by hand, as a check: every
matrix multiply of the forward (2 FLOPs per multiply-add; attention counted in
full, as the counter does, although half of it is masked), and twice that for
the backward (the gradients of the inputs and of the weights). That is the
familiar 6 x parameters x tokens, minus the embeddings (lookups, not
multiplies), plus attention.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from .model import ModelConfig, TinyLM, lm_loss


def step_flops(cfg: ModelConfig, batch_size: int) -> int:
    """FLOPs of one forward and backward on ``batch_size`` sequences of ``cfg.seq_len``, by PyTorch's counter."""
    with torch.device("meta"):
        model = TinyLM(cfg)
        inputs = torch.zeros(batch_size, cfg.seq_len, dtype=torch.long)
        targets = torch.zeros(batch_size, cfg.seq_len, dtype=torch.long)
    counter = FlopCounterMode(display=False)
    with counter:
        lm_loss(model, inputs, targets).backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is unannotated
    return int(counter.get_total_flops())


def analytic_step_flops(cfg: ModelConfig, batch_size: int) -> int:
    """The same count by hand: forward matrix multiplies, times three."""
    d, t, tokens = cfg.d_model, cfg.seq_len, batch_size * cfg.seq_len
    per_token_block = 2 * d * 3 * d + 2 * d * d + 2 * (2 * d * 4 * d)  # qkv, proj, the MLP's two layers
    attention = batch_size * cfg.n_heads * 2 * (2 * t * t * (d // cfg.n_heads))  # q @ k^T and weights @ v
    forward = tokens * (cfg.n_layers * per_token_block + 2 * d * cfg.vocab) + cfg.n_layers * attention
    return 3 * forward
