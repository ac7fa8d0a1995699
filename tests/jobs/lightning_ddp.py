"""A PyTorch Lightning DDP job on CPU that knows nothing of ranktop (``devices=2``, ``strategy="ddp"``).

Lightning starts the second process itself, with ``LOCAL_RANK=1`` and no ``RANK``;
the first has neither until Lightning sets them. ``--seconds`` of training.
"""

import argparse
import time
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def training_step(self, batch, index):
        x, y = batch
        time.sleep(0.01)
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=int, default=60)
    args = p.parse_args()
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(1 << 16, 32), torch.randn(1 << 16, 1))
    trainer = L.Trainer(
        devices=2,
        accelerator="cpu",
        strategy="ddp",
        max_time={"seconds": args.seconds},
        max_epochs=1000,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regression(), DataLoader(data, batch_size=16))
