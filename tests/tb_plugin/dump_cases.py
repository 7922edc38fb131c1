"""Small dump folders for tests that build a graph from them (the plugin's route tests and the e2e log directory).

``weighted_rank`` writes one rank of a two-layer model whose ``Module.fc.Linear.forward.0`` has its weight and
output scaled by ``w``: a debug folder with ``w=3`` against a bench folder with ``w=1`` gives a node drawn as passing
(its inputs match, its weight differs, so the reference's rule lets its output be 200 % off). ``collected_graph``
builds the database of one step of a small MLP recorded by the real collector (data flow included).
"""
import os
import sys

from tests.graph_builder import synth

__all__ = ["FC", "weighted_rank", "collected_graph"]

T = synth.tensor
FC = "Module.fc.Linear.forward.0"


def weighted_rank(folder, w):
    data = {"Module.inp.Linear.forward.0": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0)]),
            FC: dict(synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0 * w)]),
                     parameters={"weight": T((4, 4), norm=1.0 * w, grad=True)})}
    return synth.simple_rank(folder, data, {k: None for k in data})


def collected_graph(out_dir, level: str = "L1") -> str:
    """One collected step of a small MLP (linear -> torch.relu -> linear, then an add of both linears' outputs), built
    into a database under `out_dir`; returns the database's file name."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "collector"))
    import torch

    from tbprobe import PrecisionDebugger
    from tbprobe.graph_builder import run_graph

    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    dump = os.path.join(str(out_dir), "dump")
    dbg = PrecisionDebugger(dump_path=dump, level=level, step=[0])
    dbg.start()
    h = fc1(torch.randn(2, 4))
    y = fc2(torch.relu(h))
    (y + h).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    result = run_graph(dump, None, str(out_dir), parallel=False, progress=False)
    return os.path.basename(result.path)
