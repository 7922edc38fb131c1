"""Small dump folders for tests that build a graph from them (the plugin's route tests and the e2e log directory).

``weighted_rank`` writes one rank of a two-layer model whose ``Module.fc.Linear.forward.0`` has its weight and
output scaled by ``w``: a debug folder with ``w=3`` against a bench folder with ``w=1`` gives a node drawn as passing
(its inputs match, its weight differs, so the reference's rule lets its output be 200 % off).
"""
from tests.graph_builder import synth

__all__ = ["FC", "weighted_rank"]

T = synth.tensor
FC = "Module.fc.Linear.forward.0"


def weighted_rank(folder, w):
    data = {"Module.inp.Linear.forward.0": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0)]),
            FC: dict(synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0 * w)]),
                     parameters={"weight": T((4, 4), norm=1.0 * w, grad=True)})}
    return synth.simple_rank(folder, data, {k: None for k in data})
