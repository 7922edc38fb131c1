"""A live graph (the collector's `.vis.db` under `<dump_path>_tb/`, written while training runs): the meta says so,
and its steps are read afresh as the collector adds steps and drops old ones."""
from tbprobe.formats.live_vis_db import LiveVisDb
from tests.formats.vis_rows import node_row
from tests.tb_plugin.conftest import db_file, make_api


def _add(live, step):
    live.add_graph([node_row(step, 0, "NPU", i, 3) for i in range(3)], [], [], step=step, rank=0, keep_steps=2)


def test_the_meta_says_a_live_file_is_live_and_follows_its_steps(tmp_path, api, logdir):
    folder = tmp_path / "job_tb"
    folder.mkdir()
    server = make_api(tmp_path)
    with LiveVisDb(folder / "build_rank0.vis.db") as live:
        _add(live, 0)
        status, meta = server.get("/api/meta", run="job_tb", file="build_rank0.vis.db")
        assert status == 200 and meta["live"] is True and meta["steps"] == [0]
        _add(live, 1)
        _add(live, 2)   # (step 0 dropped: the last 2 kept)
        _, meta = server.get("/api/meta", run="job_tb", file="build_rank0.vis.db")
        assert meta["steps"] == [1, 2]
        assert server.get("/api/root", run="job_tb", file="build_rank0.vis.db", step=2, side="NPU")[0] == 200
        assert server.get("/api/root", run="job_tb", file="build_rank0.vis.db", step=0, side="NPU")[0] == 404
    # closed by its writer (a debugger's close(), the process's exit): no longer live, the page stops polling
    assert server.get("/api/meta", run="job_tb", file="build_rank0.vis.db")[1]["live"] is False
    with LiveVisDb(folder / "build_rank0.vis.db") as live:   # a run resumed on it writes it again
        assert server.get("/api/meta", run="job_tb", file="build_rank0.vis.db")[1]["live"] is True
    run, file = db_file(logdir, "cmp_stat")
    assert api.get("/api/meta", run=run, file=file)[1]["live"] is False
