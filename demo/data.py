"""The demo's data: an endless, deterministic stream of token sequences with learnable structure.

Nothing is downloaded. Each sequence walks a fixed random Markov chain over the
vocabulary: the next token is the current token's fixed successor, except with
probability ``noise`` a uniformly random token. A model can learn the successor
table, so the loss falls visibly from ln(vocab) towards the chain's entropy
(:meth:`MarkovTokens.entropy`), which the training log prints as the floor.

Sequence ``i`` depends only on ``(seed, i)``, and every (rank, DataLoader
worker) pair reads its own residue class of ``i``, so ranks and workers never
repeat each other's samples and a rerun sees the same data.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info


class MarkovTokens(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(
        self,
        vocab: int,
        seq_len: int,
        *,
        rank: int = 0,
        world: int = 1,
        seed: int = 0,
        noise: float = 0.2,
    ):
        super().__init__()
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be a probability, got {noise}")
        self.vocab = vocab
        self.seq_len = seq_len
        self.rank = rank
        self.world = world
        self.seed = seed
        self.noise = noise
        successors = list(range(vocab))
        random.Random(seed).shuffle(successors)
        self.successors = successors

    def entropy(self) -> float:
        """The best achievable mean next-token loss, in nats: what a perfect model would score."""
        v, p = self.vocab, self.noise
        likely = 1.0 - p + p / v  # the successor, also drawable as noise
        rest = p / v
        return -(likely * math.log(likely)) - (v - 1) * (rest * math.log(rest) if rest else 0.0)

    def sequence(self, index: int) -> torch.Tensor:
        """The ``seq_len + 1`` tokens of sequence ``index``: inputs are [:-1], targets [1:]."""
        rng = random.Random(self.seed * 1_000_003 + index)
        token = rng.randrange(self.vocab)
        tokens = [token]
        for _ in range(self.seq_len):
            token = rng.randrange(self.vocab) if rng.random() < self.noise else self.successors[token]
            tokens.append(token)
        return torch.tensor(tokens, dtype=torch.long)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        shard, shards = self.rank * workers + worker, self.world * workers
        for index in itertools.count(shard, shards):
            tokens = self.sequence(index)
            yield tokens[:-1], tokens[1:]
