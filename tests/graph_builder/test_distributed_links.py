"""Cross-rank links of communication nodes (graph_builder/distributed.py): which nodes are paired and the
`communications_type` they carry, in the reference's three words (tb-graph-ascend has labels for no others)."""
from tbprobe.graph_builder.distributed import link_ranks
from tbprobe.graph_builder.model import Graph, Node

GROUP = {"type": "torch.ProcessGroup", "group_ranks": [0, 1, 2], "group_id": "g1"}


def _graphs(calls):
    """Three ranks, each making `calls` ([(api, args)]) in that order, in process group g1."""
    graphs = []
    for rank in range(3):
        g = Graph("NPU", 0, rank)
        counts = {}
        for order, (api, args) in enumerate(calls):
            n = counts.get(api, 0)
            counts[api] = n + 1
            name = f"Distributed.{api}.{n}.forward"
            entry = {"input_args": [{"type": "torch.Tensor"}] + [{"type": "int", "value": a} for a in args]
                     + [GROUP], "input_kwargs": {}}
            g.nodes[name] = Node(name, "api", entry=entry, exec_order=order)
        graphs.append(g)
    return graphs


def test_collectives_are_labelled_send_receive_or_by_their_root_as_the_reference_does():
    graphs = _graphs([("all_reduce", []), ("broadcast", [1]), ("reduce", [2])])
    assert link_ranks(graphs) == 3 * 3 * 2
    kinds = {(g.rank, name): n.distributed["communications_type"] for g in graphs for name, n in g.nodes.items()
             if n.distributed}
    for rank in range(3):
        assert kinds[(rank, "Distributed.all_reduce.0.forward")] == "send_receive"
        assert kinds[(rank, "Distributed.broadcast.0.forward")] == ("send" if rank == 1 else "receive")
        assert kinds[(rank, "Distributed.reduce.0.forward")] == ("receive" if rank == 2 else "send")
    peers = graphs[0].nodes["Distributed.all_reduce.0.forward"].distributed["nodes_info"]
    assert sorted(peers) == ["1", "2"] and peers["1"][1] == "Distributed.all_reduce.0.forward"
