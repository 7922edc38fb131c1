"""Small dump folders for the first-divergence tests, shared with the plugin's (tests/tb_plugin/test_findings_why.py):
``under`` writes a rank whose records all hang under one parent, ``scaled_mlp`` one whose only difference between
the sides is a constant argument (x * factor)."""
from tests.graph_builder import synth

__all__ = ["under", "scaled_mlp"]

T = synth.tensor


def under(folder, data: dict, parent: str, flow=None):
    """A rank folder of `data`, every record but `parent` inside it (construct.json), with the data flow `flow`
    (dataflow.json's mapping) when given."""
    construct = {k: parent for k in data if k != parent}
    construct[parent] = None
    return synth.simple_rank(folder, data, construct, extra={"dataflow.json": flow} if flow else None)


def scaled_mlp(folder, factor, flow):
    """x -> gelu -> x * factor (a constant argument) -> linear inside Module.mlp, then a backward record whose
    error comes later. Only the multiplication's constant differs between the sides."""
    mlp = "Module.mlp.MLP.forward.0"
    data = {
        "Functional.gelu.0.forward": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0, grad=True)]),
        "Tensor.__mul__.0.forward": synth.api_entry([T((4,), norm=2.0, grad=True), {"type": "float",
                                                                                  "value": factor}],
                                                    [T((4,), norm=2.0 * factor, grad=True)]),
        "Functional.linear.0.forward": synth.api_entry([T((4,), norm=2.0 * factor, grad=True)],
                                                       [T((4,), norm=1.0 * factor, grad=True)]),
        mlp: synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=1.0 * factor, grad=True)]),
        "Functional.gelu.0.backward": {"input": [T((4,), norm=1.0)], "output": [T((4,), norm=1.0 * factor)]},
    }
    return under(folder, data, mlp, {"Tensor.__mul__.0.forward": {"0": "Functional.gelu.0.forward"},
                                      "Functional.linear.0.forward": {"0": "Tensor.__mul__.0.forward"}}
                  if flow else None)
