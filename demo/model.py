"""The demo's model: a small decoder-only transformer language model.

Small on purpose: one training step must take tens of milliseconds on a laptop
CPU with four ranks sharing two cores, so the straggler, hang and leak switches
of :mod:`ranktop.demo.train` show up on ranktop within seconds. It is still a
real transformer (causal self-attention, MLP, layer norm, residuals), so its
forward, backward and optimizer phases have the proportions of real training
rather than of a toy matrix multiply.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 256
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    seq_len: int = 64


class Block(nn.Module):
    """One pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        # (b, t, d) -> (b, heads, t, d / heads)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """Token and position embeddings, a stack of blocks, and a linear head over the vocabulary."""

    def __init__(self, cfg: ModelConfig = ModelConfig()):
        super().__init__()
        if cfg.d_model % cfg.n_heads:
            raise ValueError(f"d_model ({cfg.d_model}) must be divisible by n_heads ({cfg.n_heads})")
        self.cfg = cfg
        self.tokens = nn.Embedding(cfg.vocab, cfg.d_model)
        self.positions = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch, time, vocab) for token ids of shape (batch, time)."""
        t = idx.shape[1]
        if t > self.cfg.seq_len:
            raise ValueError(f"sequence of {t} tokens is longer than the model's seq_len {self.cfg.seq_len}")
        pos = torch.arange(t, device=idx.device)
        x = self.tokens(idx) + self.positions(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy, in nats."""
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
