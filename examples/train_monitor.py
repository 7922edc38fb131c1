"""Train a small transformer with the training monitor on, with an optional injected spike, then look at it in
TensorBoard (GRAPH_ASCEND -> Monitor, or the SCALARS tab).

    python examples/train_monitor.py --out runs/monitor --steps 60 --spike-at 40
    tensorboard --logdir runs
    tbprobe monitor export-csv runs/monitor        # the reference monitor's CSV files

Two data-parallel ranks on CPU (one TensorBoard run each):

    torchrun --nproc_per_node 2 examples/train_monitor.py --out runs/monitor_ddp
"""
import argparse
import json
import os

import torch

from tbprobe import TrainerMon

D, HEADS, SEQ, VOCAB = 64, 4, 32, 256


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D)
        self.attn = torch.nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(), torch.nn.Linear(4 * D, D))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(torch.nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D)
        self.layers = torch.nn.ModuleList([Block() for _ in range(layers)])
        self.head = torch.nn.Linear(D, VOCAB)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/monitor", help="monitor output folder (one rank<R> run per rank)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--spike-at", type=int, default=None, help="scale layer 1's weights x20 at this step")
    args = ap.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank() if distributed else 0
    torch.manual_seed(0)
    model = TinyGPT(args.layers)
    train_model = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.AdamW(train_model.parameters(), lr=3e-4)

    config = {
        "targets": {f"layers.{i}": {} for i in range(args.layers)} | {"embed": {}, "head": {}},
        "xy_distribution": True,
        "wg_distribution": True,
        "mv_distribution": True,
        "ops": ["min", "max", "mean", "norm", "nans"],
        "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1.0, "ops": ["norm"]}}]},
        "output_dir": args.out,
    }
    os.makedirs(args.out, exist_ok=True)
    config_path = os.path.join(args.out, f"monitor_config_rank{rank}.json")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    mon = TrainerMon(config_path)
    mon.set_monitor(train_model, optimizer)

    g = torch.Generator().manual_seed(100 + rank)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(args.steps):
        if step == args.spike_at:
            with torch.no_grad():
                model.layers[1].mlp[0].weight.mul_(20.0)
        ids = torch.randint(0, VOCAB, (8, SEQ + 1), generator=g)
        loss = loss_fn(train_model(ids[:, :-1]).reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    mon.close()
    print(f"rank {rank}: {args.steps} steps, {mon.anomalies} anomalies, run folder {mon.run_dir}")
    if distributed:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
