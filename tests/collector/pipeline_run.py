"""Two gloo ranks training a model split into two pipeline stages (stage s on rank s) with a hand-written 1F1B
schedule over micro-batches: activations go forward rank 0 -> rank 1, their gradients back rank 1 -> rank 0, by
torch.distributed point to point (isend/irecv waited, send/recv, batch_isend_irecv); the loss on the last stage and
an optimizer step on each rank. test_pipeline.py runs it with no tool, under tbprobe and under msprobe. With
SCHEDULE "torch" the same stages run under torch.distributed.pipelining's PipelineStage and Schedule1F1B instead
(its own P2P: isend/irecv waited late, send_object_list's batch_isend_irecv for the shapes in the first step).
With SCHEDULE "interleaved" the model is split into four stages, two model chunks a rank (stage s on rank s % 2:
rank 0 holds stages 0 and 2, rank 1 stages 1 and 3, Megatron's virtual pipeline), run by pipelining's
ScheduleInterleaved1F1B over four micro-batches; each rank gives the debugger its list of chunks.

Each rank writes OUT/rank<R>.json: its losses (the last stage's, one per micro-batch), the statistics of every
tensor it sent (in order, as the other rank received them) and, under tbprobe, hook_errors; and OUT/weights<R>.pt,
its stage's parameters after the last step (interleaved: its chunks', keyed "<chunk>.<name>" as the dump names
a chunk's modules). The dump goes to OUT/dump.

usage: pipeline_run.py TOOL LEVEL OUT [SCHEDULE]
    TOOL: plain | tbprobe | msprobe; SCHEDULE: hand (default) | torch | interleaved
Started once, it spawns both ranks; started once per rank with RANK and MASTER_PORT set (as test_pipeline.py does,
saving the parent's imports), it is that rank.
"""
import gc
import json
import logging
import os
import socket
import sys
import warnings

from runner_config import collector, load_tool  # (this script's folder is on sys.path)

STEPS = 3
MICRO = 3            # micro-batches per step
VOCAB, HIDDEN, SEQ, BATCH = 16, 8, 4, 2
LAYERS = 4
SCHEDULES = ("hand", "torch", "interleaved")
# (interleaved: a multiple of the ranks, at least as many micro-batches as stages)
MICRO_OF = {"hand": MICRO, "torch": MICRO, "interleaved": 4}
STAGES_OF = {"hand": 2, "torch": 2, "interleaved": 4}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stages(indices, n_stages: int) -> list:
    """The stages `indices` of the model split into `n_stages` (stage s: the layers s * LAYERS / n_stages on, the
    embedding on the first, the final norm and head on the last). The whole model is built on every rank from the
    same seed, so the split model's weights are the whole one's; the layers keep their global numbers (layers.2 is
    on rank 1 of two stages), as in Megatron, so a module's name tells its stage."""
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(HIDDEN)
            self.fc1 = nn.Linear(HIDDEN, 2 * HIDDEN)
            self.fc2 = nn.Linear(2 * HIDDEN, HIDDEN)

        def forward(self, x):
            return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))

    class Stage(nn.Module):
        def __init__(self, parts: dict) -> None:
            super().__init__()
            for name, module in parts.items():
                setattr(self, name, module)

        def forward(self, x):
            if hasattr(self, "embed"):
                x = self.embed(x)
            for layer in self.layers.values():
                x = layer(x)
            if hasattr(self, "head"):
                x = self.head(self.norm(x))
            return x

    embed, layers = nn.Embedding(VOCAB, HIDDEN), [Block() for _ in range(LAYERS)]
    norm, head = nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, VOCAB)
    stages, per = [], LAYERS // n_stages
    for s in indices:
        parts = {"embed": embed} if s == 0 else {}
        parts["layers"] = nn.ModuleDict({str(i): layers[i] for i in range(s * per, (s + 1) * per)})
        if s == n_stages - 1:
            parts.update(norm=norm, head=head)
        stages.append(Stage(parts))
    return stages


def _stats(t) -> dict:
    return {"shape": list(t.shape), "Max": t.max().item(), "Min": t.min().item()}


def _one_f_one_b(rank: int, stage, tokens, targets, sent: list, losses: list) -> None:
    """One step of 1F1B on two stages. Rank 0: forward of micro-batch 0, then for each next micro-batch its forward
    and the backward of the one before (the activation out and the gradient in, one batch_isend_irecv), then the
    last backward. Rank 1: each micro-batch's forward, loss and backward; its input's gradient out and the next
    activation in (one batch_isend_irecv), the last gradient by send."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    peer = 1 - rank
    shape = (BATCH, SEQ, HIDDEN)
    if rank == 0:
        outs = [stage(tokens[0])]
        dist.isend(outs[0], peer).wait()
        sent.append(outs[0])
        for i in range(1, MICRO):
            outs.append(stage(tokens[i]))
            grad = torch.empty(shape)
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, outs[i], peer),
                                                dist.P2POp(dist.irecv, grad, peer)]):
                work.wait()
            sent.append(outs[i])
            torch.autograd.backward(outs[i - 1], grad_tensors=grad)
        grad = torch.empty(shape)
        dist.recv(grad, peer)
        torch.autograd.backward(outs[-1], grad_tensors=grad)
        return
    act = torch.empty(shape)
    dist.irecv(act, peer).wait()
    for i in range(MICRO):
        act.requires_grad_()
        logits = stage(act)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets[i].reshape(-1)) / MICRO
        loss.backward()
        losses.append(loss.item())
        grad = act.grad
        sent.append(grad)
        if i < MICRO - 1:
            act = torch.empty(shape)
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, grad, peer),
                                                dist.P2POp(dist.irecv, act, peer)]):
                work.wait()
        else:
            dist.send(grad, peer)


def _loss_fn(logits, target):
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def _torch_schedule(rank: int, chunks: list, schedule_kind: str):
    """torch.distributed.pipelining's schedule over the rank's stages, its loss the hand-written schedule's:
    Schedule1F1B over one stage a rank, ScheduleInterleaved1F1B over several (chunk i is stage rank + 2 i)."""
    import torch
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    n_stages, micro = STAGES_OF[schedule_kind], MICRO_OF[schedule_kind]
    stages = [PipelineStage(chunk, rank + 2 * i, n_stages, torch.device("cpu")) for i, chunk in enumerate(chunks)]
    if schedule_kind == "interleaved":
        return ScheduleInterleaved1F1B(stages, n_microbatches=micro, loss_fn=_loss_fn)
    return Schedule1F1B(stages[0], n_microbatches=micro, loss_fn=_loss_fn)


def _torch_step(rank: int, schedule, tokens, targets, losses: list) -> None:
    """The first stage (rank 0) takes the tokens, the last (rank 1, under both schedules) the targets."""
    if rank == 0:
        schedule.step(tokens.reshape(-1, SEQ))
    else:
        got: list = []
        schedule.step(target=targets.reshape(-1, SEQ), losses=got)
        losses.extend(loss.item() for loss in got)


def _worker(rank: int, tool: str, level: str, out: str, port: int, schedule_kind: str) -> None:
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    debugger = None
    if tool != "plain":
        debugger = collector(tool, os.path.join(out, f"config{rank}.json"), os.path.join(out, "dump"), level,
                             step=list(range(STEPS)))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    load_tool("msprobe" if tool == "msprobe" else "tbprobe").seed_all(1234)
    chunks = _stages(range(rank, STAGES_OF[schedule_kind], 2), STAGES_OF[schedule_kind])
    # (one stage a rank: the model given alone; several: the list of chunks, as Megatron gives it)
    model = chunks if len(chunks) > 1 else chunks[0]
    opt = torch.optim.AdamW([p for chunk in chunks for p in chunk.parameters()], lr=0.01)
    schedule = _torch_schedule(rank, chunks, schedule_kind) if schedule_kind != "hand" else None
    gen = torch.Generator().manual_seed(7)          # the same data on both ranks: tokens for 0, targets for 1
    losses, sent = [], []
    micro = MICRO_OF[schedule_kind]
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (micro, BATCH, SEQ), generator=gen)
        targets = torch.randint(0, VOCAB, (micro, BATCH, SEQ), generator=gen)
        if debugger is not None:
            debugger.start(model=model)
        step_sent = []
        if schedule is None:
            _one_f_one_b(rank, model, tokens, targets, step_sent, losses)
        else:
            _torch_step(rank, schedule, tokens, targets, losses)
        opt.step()
        opt.zero_grad()
        if debugger is not None:
            debugger.stop()
        sent.append([_stats(t.detach()) for t in step_sent])   # (outside the collected calls)
        if debugger is not None:
            debugger.step()
    result = {"losses": losses, "sent": sent}
    if tool == "tbprobe":
        debugger.close()
        result["errors"] = debugger.hook_errors
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    prefixes = [f"{i}." for i in range(len(chunks))] if len(chunks) > 1 else [""]
    torch.save({p + k: v.detach().clone() for p, chunk in zip(prefixes, chunks) for k, v in chunk.state_dict().items()},
               os.path.join(out, f"weights{rank}.pt"))
    # (reference cycles holding gloo's work, freed at interpreter shutdown, abort the process now and then: freed
    # here, while the interpreter is whole; see dist_patterns_run.py)
    gc.collect()
    dist.destroy_process_group()


def main() -> None:
    tool, level, out = sys.argv[1:4]
    schedule_kind = sys.argv[4] if len(sys.argv) > 4 else "hand"
    if tool not in ("plain", "tbprobe", "msprobe") or schedule_kind not in SCHEDULES:
        raise SystemExit(__doc__)
    os.makedirs(out, exist_ok=True)
    if "RANK" in os.environ:
        _worker(int(os.environ["RANK"]), tool, level, out, int(os.environ["MASTER_PORT"]), schedule_kind)
        return
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(tool, level, out, _free_port(), schedule_kind), nprocs=2, join=True)


if __name__ == "__main__":
    main()
