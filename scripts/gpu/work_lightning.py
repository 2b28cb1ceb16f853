"""A PyTorch Lightning `fit` of a small MLP on random data (one GPU, no logger, no checkpoint),
offline. Prints the work's seconds, then CLOCK_MONOTONIC (ns) as its last act, for
scripts/gpu/perf_suite.py.

Usage: python3 work_lightning.py [EPOCHS=2]
"""

import os
import sys
import time

import torch

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(512, 2048),
            torch.nn.ReLU(),
            torch.nn.Linear(2048, 2048),
            torch.nn.ReLU(),
            torch.nn.Linear(2048, 10),
        )

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(8192, 512), torch.randint(0, 10, (8192,)))
loader = torch.utils.data.DataLoader(data, batch_size=128)
t0 = time.perf_counter()
trainer = pl.Trainer(
    accelerator="gpu",
    devices=1,
    max_epochs=epochs,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Net(), loader)
print(f"work {time.perf_counter() - t0:.3f} s")
if os.environ.get("GPUSHIM_SUITE_MAPS") == "1":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import maps_summary

    maps_summary.main()
print(time.monotonic_ns(), flush=True)
