"""The framework-neutral core stays neutral: a MindSpore adapter must be able to reuse it without PyTorch."""
import pkgutil
import subprocess
import sys

import tbprobe.collector

# every pure-Python module of the core, found rather than listed, so a new one is checked too
# (the _c* extensions are the PyTorch adapter's kernels, built beside the core)
CORE = sorted(m.name for m in pkgutil.iter_modules(tbprobe.collector.__path__)
              if not m.ispkg and not m.name.startswith("_"))


def test_core_modules_are_found():
    assert {"config", "naming", "filters", "recorder", "writer", "events", "live_graph", "step_outputs",
            "guard"} <= set(CORE)


def test_core_imports_no_framework():
    code = ("import importlib, sys\n"
            f"for n in {CORE!r}: importlib.import_module('tbprobe.collector.' + n)\n"
            "print(sorted(k for k in ('torch', 'mindspore', 'numpy') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"the core imported {out.stdout.strip()}"
