"""Small real models, a training loop and event-file readers shared by the monitor tests."""
import json
import os
from typing import Dict, List, Optional

import torch


class Block(torch.nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.poison: Optional[float] = None  # set to inf/nan to inject a bad value into this block's output

    def forward(self, x):
        y = torch.relu(self.fc(x)) + x
        if self.poison is not None:
            y = y * self.poison
        return y


class Net(torch.nn.Module):
    def __init__(self, d: int = 8, n: int = 2):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(d) for _ in range(n)])
        self.head = torch.nn.Linear(d, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def write_config(tmp_path, out_dir, **cfg) -> str:
    cfg.setdefault("output_dir", str(out_dir))
    path = os.path.join(str(tmp_path), "monitor_config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def train(model, optimizer, steps: int, batch: int = 4, d: int = 8, seed: int = 0, scale=None, grad_acc: int = 1,
          zero_last: bool = True):
    """A real loop: forward, backward, optimizer.step; ``scale`` maps step -> input multiplier (spikes)."""
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        for _ in range(grad_acc):
            x = torch.randn(batch, d, generator=g)
            if scale and step in scale:
                x = x * scale[step]
            loss = model(x).pow(2).mean() / grad_acc
            loss.backward()
        optimizer.step()
        if zero_last or step < steps - 1:
            optimizer.zero_grad()


def read_scalars(run_dir: str) -> Dict[str, Dict[int, float]]:
    """tag -> {step: value} of every scalar in a run folder (TensorBoard's own reader)."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}


def read_anomalies(run_dir: str) -> List[dict]:
    with open(os.path.join(run_dir, "anomalies.json")) as f:
        return json.load(f)
