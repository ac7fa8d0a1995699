"""A torch script that knows nothing of ranktop nor of torch.distributed: one SLURM task of many.

Under ``srun -n 2 ranktop launch -- python plain_torch_task.py`` each task is a rank
only by SLURM's variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID).
"""

import time

import torch

model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(100_000):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(0.01)
