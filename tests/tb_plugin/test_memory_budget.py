"""The open-file cache is bounded by the memory its files hold, not by their count alone (four 300 MB files took
TensorBoard to 4.6 GB), and a full scan's memory map of the file does not stay open in the connection pool."""
import os

from tbprobe.tb_plugin.graph_files import GraphFiles
from tbprobe.tb_plugin.graph_store import DbGraphFile
from tests.tb_plugin.synth_db import make_compare_db


def _paths(tmp_path, n: int):
    return [make_compare_db(str(tmp_path / f"c{i}.vis.db"), n_nodes=3000, big_children=200, with_data=False,
                            seed=i) for i in range(n)]


def _open_paths(files: GraphFiles):
    return sorted(os.path.basename(k[0]) for k in files._open)


def test_files_over_the_memory_budget_are_closed_least_recently_used_first(tmp_path):
    paths = _paths(tmp_path, 3)
    probe = DbGraphFile(paths[0])
    for side in ("NPU", "Bench"):
        probe.index(0, 0, side)
    one = probe.memory_estimate()
    probe.close()
    assert one > 3000 * 2 * 100          # (two sides of 3000 nodes: at least some hundred bytes a node)
    files = GraphFiles(capacity=6, budget_bytes=int(2.5 * one))
    for path in paths:
        gf = files.get(path)
        for side in ("NPU", "Bench"):
            gf.index(0, 0, side)
    files.get(paths[2])                  # (the budget is checked on use: the indexes came after the open)
    assert _open_paths(files) == ["c1.vis.db", "c2.vis.db"]
    assert files.memory_estimate() <= 2.5 * one
    files.get(paths[1])
    files.get(paths[0])                  # c2 is now the least recently used
    files.get(paths[0]).index(0, 0, "NPU")
    files.get(paths[0]).index(0, 0, "Bench")
    files.get(paths[0])
    assert _open_paths(files) == ["c0.vis.db", "c1.vis.db"]


def test_the_most_recent_file_stays_open_over_the_budget(tmp_path):
    path, = _paths(tmp_path, 1)
    files = GraphFiles(budget_bytes=1)
    files.get(path).index(0, 0, "NPU")
    files.get(path)
    assert _open_paths(files) == ["c0.vis.db"]


def test_an_index_scan_leaves_no_memory_mapped_connection_in_the_pool(tmp_path):
    path, = _paths(tmp_path, 1)
    gf = DbGraphFile(path)
    gf.index(0, 0, "NPU")
    gf.index(0, 0, "Bench")
    gf.node(0, 0, "NPU", "DefaultModel")
    assert gf._idle
    assert [c.execute("PRAGMA mmap_size").fetchone()[0] for c in gf._idle] == [0] * len(gf._idle)
    gf.close()


def test_the_compare_table_counts_in_the_memory_estimate_about_as_much_as_it_holds(tmp_path):
    """The compare table (a dict of every column per compared item, cached on the open file) is the largest
    derived structure of a big compare file; the estimate left it out, so the budget kept files open past it."""
    import gc
    import tracemalloc

    from tbprobe.tb_plugin.graph_data import GraphData

    os.makedirs(tmp_path / "r")
    make_compare_db(str(tmp_path / "r" / "c.vis.db"), n_nodes=2000, big_children=200, seed=3)
    data = GraphData(str(tmp_path))
    gf, _ = data.graph("r", "c.vis.db", 0, 0, "NPU")
    before = gf.memory_estimate()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        answer = data.compare_table("r", "c.vis.db", 0, 0, [], "", "", False, 0, 1)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert answer["total"] > 2000
    added = gf.memory_estimate() - before
    assert held > 0
    assert 0.5 * held <= added <= 2 * held, (added, held)
