"""The smallest use of tbprobe's collector: an MLP trained for a few steps, one dump folder per step.

    python examples/train_mlp.py --dump-path out/mlp --level L0 --steps 3
    msprobe graph_visualize -tp out/mlp -o vis     # the reference reads it too
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from tbprobe import PrecisionDebugger, seed_all


def main(argv=None) -> list:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dump-path", default="./tbprobe_mlp_dump")
    p.add_argument("--level", default="L0", choices=["L0", "L1", "mix"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)

    seed_all(args.seed, mode=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    debugger = PrecisionDebugger(dump_path=args.dump_path, level=args.level, step=list(range(args.steps)))

    @debugger.step_fn                 # start / stop / step around one training step
    def train_step(x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    debugger.model = model
    losses = []
    for step in range(args.steps):
        losses.append(train_step(torch.randn(8, 16), torch.randn(8, 4)))
        print(f"step {step} loss {losses[-1]:.6f}")
    debugger.close()                  # waits for the background writer
    return losses


if __name__ == "__main__":
    main()
