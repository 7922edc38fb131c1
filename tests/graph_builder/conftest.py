"""Shared fixtures of the graph builder tests.

(tests/graph_builder is a package, so pytest imports this as ``tests.graph_builder.conftest``: no clash with the
``conftest`` of tests/collector, which is not one.)"""
import pytest


@pytest.fixture(scope="session")
def collector_importable():
    """Skips a test whose dumps come from a real collected run when the collector cannot be imported: it is
    another part of tbprobe, and the skip says why rather than failing in a subprocess."""
    try:
        import tbprobe.collector  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure (a missing build, a broken torch) is the reason
        pytest.skip(f"tbprobe collector not importable: {exc}")


def collect_sides(base, script: str, sides=(("d", "1"), ("b", "0"))):
    """Runs the collector script `script` once per side (`python -c script <base>/<side> <flag>`) and returns
    `base`. A script that fails is a failure, not a skip: the collector is importable (collector_importable),
    so a run that does not finish is a bug of tbprobe's."""
    import subprocess
    import sys

    for side, flag in sides:
        (base / side).mkdir()
        proc = subprocess.run([sys.executable, "-c", script, str(base / side), flag], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-800:]
    return base


def step0_rank_dir(folder) -> str:
    """The one rank folder of a collected dump's step 0."""
    import glob

    found = glob.glob(str(folder / "step0" / "*" / "dump.json"))
    assert len(found) == 1, found
    return found[0].rsplit("/", 1)[0]
