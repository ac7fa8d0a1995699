"""Megatron-Core's own GPT training on 4 CPU ranks (gloo): tensor parallel 2 x pipeline parallel 2.

Megatron-Core's ``parallel_state`` makes the groups (their ``group_desc`` names them), its ``GPTModel``
(local layer spec: no Transformer Engine), its ``DistributedDataParallel``, its optimizer and its
pipeline schedules (``get_forward_backward_func``: 1F1B, or with ``--interleaved`` two virtual stages per
rank, one layer each) train a tiny model on random tokens. Megatron-Core expects CUDA in a few places; the
shims below map them to the CPU, inside this job only. ``--slow-rank R --slow-ms MS`` makes R's forward
MS longer per micro-batch. The script never imports ranktop: run it under ``ranktop launch``.

Options for interleaving with PP=2: ``overlap_p2p_comm=True, batch_p2p_comm=False`` (Megatron's interleaved
schedule needs one of them); Megatron then sends one direction of its pipeline traffic on the default group.
"""

import argparse
import os
import time

import torch

# -- CUDA, mapped to the CPU (Megatron-Core calls these where a GPU is taken for granted) -----------------
torch.cuda.current_device = lambda: "cpu"
torch.Tensor.cuda = lambda self, *args, **kwargs: self
torch.nn.Module.cuda = lambda self, *args, **kwargs: self
_FACTORIES = ("empty", "zeros", "ones", "tensor", "arange", "full", "randn", "rand", "randint", "empty_like", "zeros_like")


def _on_cpu(factory):
    def made(*args, **kwargs):
        device = kwargs.get("device")
        if device is not None and "cuda" in str(device):
            kwargs["device"] = "cpu"
        return factory(*args, **kwargs)

    return made


for _name in _FACTORIES:
    setattr(torch, _name, _on_cpu(getattr(torch, _name)))
torch.cuda.synchronize = lambda *args, **kwargs: None
torch.cuda.get_rng_state, torch.cuda.manual_seed = torch.get_rng_state, torch.manual_seed

import torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
from megatron.core.pipeline_parallel import get_forward_backward_func  # noqa: E402
from megatron.core.tensor_parallel import random as megatron_random  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

# Megatron's RNG tracker keeps "CUDA" generator states: the CPU generator's, here.
megatron_random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
megatron_random._set_cuda_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)

VOCAB, SEQ, HIDDEN, MICRO_BATCH = 128, 16, 32, 2

parser = argparse.ArgumentParser()
parser.add_argument("--interleaved", action="store_true", help="two virtual pipeline stages per rank")
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-ms", type=float, default=0.0, help="extra forward time per micro-batch of the slow rank")
parser.add_argument("--micro-batches", type=int, default=4)
parser.add_argument("--steps", type=int, default=100_000)
args = parser.parse_args()
rank = int(os.environ["RANK"])
torch.set_num_threads(1)

dist.init_process_group("gloo")
vpp = 2 if args.interleaved else None
parallel_state.initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                                         virtual_pipeline_model_parallel_size=vpp)  # fmt: skip
megatron_random.model_parallel_cuda_manual_seed(0)

config = TransformerConfig(
    num_layers=4, hidden_size=HIDDEN, num_attention_heads=4, use_cpu_initialization=True, pipeline_dtype=torch.float32,
    tensor_model_parallel_size=2, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=vpp,
    sequence_parallel=False, gradient_accumulation_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False,
    masked_softmax_fusion=False, persist_layer_norm=False,
    overlap_p2p_comm=bool(vpp), batch_p2p_comm=not vpp,
)  # fmt: skip


class _SlowForward:
    """A forward pre-hook that holds one rank's forward for ``seconds`` per micro-batch (the slowed rank)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __call__(self, module, inputs):
        time.sleep(self.seconds)


def chunk(index: int) -> GPTModel:
    """One model chunk (a virtual stage with --interleaved): the first holds the embedding, the last the loss head."""
    pre = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=index)
    post = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=index)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=VOCAB,
                     max_sequence_length=SEQ, pre_process=pre, post_process=post, vp_stage=index)  # fmt: skip
    if rank == args.slow_rank and index == 0:
        model.register_forward_pre_hook(_SlowForward(args.slow_ms / 1000))
    return model


ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=False, overlap_grad_reduce=False, use_distributed_optimizer=False)
chunks = [DistributedDataParallel(config, ddp_config, chunk(i)) for i in range(vpp or 1)]
optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="sgd", lr=1e-3, bf16=False, fp16=False, clip_grad=0.0), chunks)
forward_backward = get_forward_backward_func()


def batches():
    while True:
        tokens = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ))
        yield {"tokens": tokens, "labels": torch.roll(tokens, -1, 1), "position_ids": torch.arange(SEQ).expand(MICRO_BATCH, SEQ)}


def forward_step(data, model):
    batch = next(data)
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

    def loss(output_tensor):
        value = output_tensor.float().mean()
        return value, {"loss": value.detach()}

    return output, loss


data = [batches() for _ in chunks]
for _ in range(args.steps):
    for model in chunks:
        model.zero_grad_buffer()
    optimizer.zero_grad()
    forward_backward(forward_step_func=forward_step, data_iterator=data if vpp else data[0], model=chunks if vpp else chunks[0],
                     num_microbatches=args.micro_batches, seq_length=SEQ, micro_batch_size=MICRO_BATCH, forward_only=False)  # fmt: skip
    for model in chunks:
        model.finish_grad_sync()
    optimizer.step()
dist.destroy_process_group()
