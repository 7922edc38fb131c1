"""The distribution's wiring: the console command and the TensorBoard entry point, end to end."""
import json
import os
import subprocess
import sys
import urllib.request
from importlib import metadata

import pytest

from tests.tb_plugin.tb_server import TensorBoardServer

BIN = os.path.dirname(sys.executable)


def test_console_command_lists_subcommands():
    out = subprocess.run([os.path.join(BIN, "tbprobe"), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage: tbprobe" in out.stdout
    for command in ("graph", "compare"):
        assert command in out.stdout


def test_module_entry_prints_version():
    import tbprobe

    out = subprocess.run([sys.executable, "-m", "tbprobe", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    assert out.stdout.strip() == f"tbprobe {tbprobe.__version__}"


def test_unknown_subcommand_is_a_clear_error():
    out = subprocess.run([sys.executable, "-m", "tbprobe", "frobnicate"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "invalid choice: 'frobnicate'" in out.stderr
    assert "Traceback" not in out.stderr


def test_public_api_is_small_and_lazy():
    code = (
        "import sys, tbprobe; assert 'torch' not in sys.modules, 'import tbprobe must not import torch';"
        "print(sorted(tbprobe.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "PrecisionDebugger" in out.stdout and "TrainerMon" in out.stdout


def test_tensorboard_entry_point_resolves_to_the_plugin_loader():
    eps = [ep for ep in metadata.entry_points(group="tensorboard_plugins") if ep.name == "graph_ascend"]
    assert len(eps) == 1
    loader_cls = eps[0].load()
    from tensorboard.plugins import base_plugin

    assert issubclass(loader_cls, base_plugin.TBLoader)


@pytest.mark.e2e
def test_real_tensorboard_process_lists_the_graph_ascend_tab(tmp_path):
    with TensorBoardServer(tmp_path) as tb:   # it waits until /data/plugins_listing answers
        with urllib.request.urlopen(f"{tb.url}/data/plugins_listing", timeout=10) as r:
            listing = json.load(r)
        assert listing is not None, "tensorboard did not answer"
        assert "graph_ascend" in listing
        entry = listing["graph_ascend"]
        assert entry["tab_name"] == "GRAPH_ASCEND"
        mechanism = entry["loading_mechanism"]
        assert mechanism["type"] == "IFRAME"
        assert mechanism["module_path"] == "/data/plugin/graph_ascend/index.js"
        with urllib.request.urlopen(f"{tb.url}{mechanism['module_path']}", timeout=10) as r:
            assert r.status == 200
            assert "javascript" in r.headers["Content-Type"]
            assert b"render" in r.read()
