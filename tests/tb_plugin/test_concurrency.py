"""Two tabs on different files never disturb each other; many threads at once get the same answers as one."""
import threading

from tests.tb_plugin.conftest import db_file


def _requests(logdir):
    out = []
    for case in ("cmp_stat", "cmp_tensor", "build", "multi", "cmp_dist"):
        run, file = db_file(logdir, case)
        q = dict(run=run, file=file, step=0, rank=0, side="NPU")
        out += [("/api/root", q), ("/api/children", dict(q, node="DefaultModel")),
                ("/api/search", dict(q, q="forward")), ("/api/filter", dict(q, overflow="high,critical")),
                ("/api/node", dict(q, node="DefaultModel"))]
    return out


def test_interleaved_tabs_on_different_files(api, logdir):
    a_run, a_file = db_file(logdir, "cmp_stat")
    b_run, b_file = db_file(logdir, "build")
    qa = dict(run=a_run, file=a_file, step=0, rank=0, side="NPU")
    qb = dict(run=b_run, file=b_file, step=0, rank=0, side="NPU")
    alone_a = api.get("/api/children", node="Module.layers.1.Block.forward.0", **qa)
    alone_b = api.get("/api/children", node="Module.layers.1.Block.forward.0", **qb)
    for _ in range(3):
        assert api.get("/api/root", **qb)[0] == 200
        assert api.get("/api/children", node="Module.layers.1.Block.forward.0", **qa) == alone_a
        assert api.get("/api/children", node="Module.layers.1.Block.forward.0", **qb) == alone_b
        assert api.get("/api/root", **qa)[0] == 200
    assert alone_a != alone_b  # compare vs build: different precision fields, so the check is meaningful


def test_concurrent_requests_from_threads(api, logdir, monkeypatch):
    from tbprobe.tb_plugin import graph_data

    # A first view answers lightly from SQLite when the index is not ready after a short wait (by design, and
    # tested in test_light_first_view.py); on a loaded machine 8 cold threads can pass that wait, and the light
    # answer differs from the index's. Here every answer must come from the index the threads race to build.
    monkeypatch.setattr(graph_data, "_FIRST_VIEW_WAIT_S", 120.0)
    requests = _requests(logdir)
    expected = [api.get(route, **params) for route, params in requests]
    from tests.tb_plugin.conftest import make_api
    fresh = make_api(logdir)  # cold caches: threads race to open files and build indexes
    errors = []

    def worker(seed: int):
        try:
            for k in range(len(requests)):
                j = (k * 7 + seed) % len(requests)
                route, params = requests[j]
                got = fresh.get(route, **params)
                if got != expected[j]:
                    errors.append((route, params, got))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_index_cache_serves_a_restarted_server_and_never_a_changed_file(api, logdir):
    from tbprobe.tb_plugin import index_cache
    from tests.tb_plugin.conftest import make_api
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU", node="DefaultModel")
    first = api.get("/api/children", **q)
    folder = index_cache.cache_dir()
    assert folder and any(n.endswith(".pickle") for n in __import__("os").listdir(folder))
    assert make_api(logdir).get("/api/children", **q) == first  # loaded from the cache
    api.post("/api/unmatch", dict(run=run, file=file, step=0, rank=0, debug="Module.head.Linear.forward.0"))
    assert api.post("/api/apply", dict(run=run, file=file))[0] == 200  # rewrites the database
    after = make_api(logdir).get("/api/children", **q)[1]
    head = [c for c in after["children"] if c["name"] == "Module.head.Linear.forward.0"][0]
    # the database says unmatched (its side file was folded in and retired: the index is the new file's)
    assert head["matched"] is False and "manual" not in head
