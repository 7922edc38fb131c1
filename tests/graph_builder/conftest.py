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
