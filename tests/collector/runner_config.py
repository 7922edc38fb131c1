"""The config.json and the PrecisionDebugger of the collector tests' runners, written in one place.

The runners (backward_run.py, dist_run.py, patterns_run.py, run_model.py, ...) each run a model under tbprobe's or
msprobe's debugger in a process of their own (msprobe's with the peers' python), and the tests compare the dumps.
Both tools must read the same config, so it is made here once: msprobe's defaults for a statistics task (every scope
and API, all data, the statistics summary), and a runner passes only what it sets apart on purpose (its steps, a
level, no task block, async_dump, risk_level ...). A changed default here changes what every runner records.

    debugger = collector(tool, os.path.join(dump_path, "config.json"), dump_path, "L1", step=[0])
"""
from __future__ import annotations

import copy
import importlib
import json
import os
import sys
from types import MappingProxyType, ModuleType
from typing import Any, Iterable, Mapping

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))      # this checkout, whose tbprobe the runners import
TOOLS = ("tbprobe", "msprobe")


def statistics(summary_mode: str = "statistics", **more: Any) -> dict:
    """A statistics task's block as msprobe's defaults have it (every scope and API, inputs and outputs) with
    `summary_mode`; `more` (scope, list, data_mode ...) set over it."""
    return {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode, **more}


STATISTICS = MappingProxyType(statistics())


def config(dump_path: str, level: str, *, task: str = "statistics", step: Iterable[int] = (),
           rank: Iterable[int] = (), block: Mapping[str, Any] | None = STATISTICS, **extra: Any) -> dict:
    """The config's keys: `task`, `dump_path`, `rank` and `step` (empty: every one), `level`, the `extra` keys
    (async_dump, risk_level ...), and `block` as the task's own block (config[task]; None: no block, the
    collector's defaults)."""
    cfg = {"task": task, "dump_path": dump_path, "rank": list(rank), "step": list(step), "level": level, **extra}
    if block is not None:
        cfg[task] = copy.deepcopy(dict(block))
    return cfg


def load_tool(tool: str) -> ModuleType:
    """The module of `tool`: msprobe.pytorch for "msprobe" (imported only then: the peers' python has it, this
    project's venv does not), else this checkout's tbprobe (its root put on sys.path, for a runner started as a
    script)."""
    if tool not in TOOLS:
        raise SystemExit(f"unknown tool {tool!r}: one of {', '.join(TOOLS)}")
    if tool == "msprobe":
        return importlib.import_module("msprobe.pytorch")
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module("tbprobe")


def collector(tool: str, config_path: str, dump_path: str, level: str, **config_kw: Any) -> Any:
    """`tool`'s PrecisionDebugger reading config_path, where config(dump_path, level, **config_kw) is written first
    (its folder made)."""
    os.makedirs(os.path.dirname(os.path.abspath(config_path)), exist_ok=True)
    with open(config_path, "w") as f:
        json.dump(config(dump_path, level, **config_kw), f)
    return load_tool(tool).PrecisionDebugger(config_path=config_path)
