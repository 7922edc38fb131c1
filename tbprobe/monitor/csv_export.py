"""CSV export of monitor runs in the reference monitor's layout: one file per data type and rank,
``<type>_<first step>-<last step>.csv`` with the columns ``vpp_stage,name,step[,micro_step],<ops...>,shape,dtype``
(the statistics in the config's order).

The event files are read with TensorBoard's own EventAccumulator (every point kept). Output folders are named
``<time>-rank<R>-tbprobe`` so the reference's CSV tools (csv2tensorboard_by_step) find them.
"""
import csv
import json
import os
import time
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

from tbprobe.errors import TbprobeError
from tbprobe.monitor.tags import CSV_TYPES, OPS, parse_tag
from tbprobe.monitor.writer import META_FILE

__all__ = ["export_run", "export_logdir", "find_monitor_runs", "split_name"]

_MICRO_TYPES = ("actv", "actv_grad")


def split_name(name: str) -> Tuple[int, str, int]:
    """(vpp_stage, bare name, micro_step) of a tag's name part ("vp1:layers.0:micro2" -> (1, "layers.0", 2))."""
    vpp, micro = 0, 0
    if name.startswith("vp") and ":" in name and name[2:name.index(":")].isdigit():
        vpp = int(name[2:name.index(":")])
        name = name[name.index(":") + 1:]
    head, sep, tail = name.rpartition(":micro")
    if sep and tail.isdigit():
        name, micro = head, int(tail)
    return vpp, name, micro


def _fmt(v: float) -> str:
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return f"{v:.7g}"


def find_monitor_runs(logdir: str) -> List[str]:
    """Folders under ``logdir`` (itself included) that hold tbprobe monitor output."""
    found = []
    for root, _dirs, files in os.walk(logdir):
        if META_FILE in files and any(".tfevents." in f for f in files):
            found.append(root)
    return sorted(found)


def _read_meta(run_dir: str) -> dict:
    """monitor_meta.json, or {} when it is missing or unreadable (the shapes and the column order are extras)."""
    try:
        with open(os.path.join(run_dir, META_FILE), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError, RecursionError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _shape_dtype(shapes: dict, key: str) -> Tuple[str, str]:
    found = shapes.get(key)
    if not isinstance(found, (list, tuple)) or len(found) < 2:   # (a hand-edited meta: no shape, not a 500)
        return "nan", "nan"
    return (str(found[0]) if found[0] != "nan" else "nan"), str(found[1])


def _check_event_files(run_dir: str) -> None:
    # A FIFO (or a device) named like an event file blocked the export for good when the reader opened it.
    for name in os.listdir(run_dir):
        path = os.path.join(run_dir, name)
        if ".tfevents." in name and not os.path.isfile(path):
            raise TbprobeError(f"{path}: not a regular file (a FIFO, a device or a socket), not an event file")


def _read_run(run_dir: str) -> Tuple[dict, Dict[str, Dict[tuple, Dict[str, float]]], List[str]]:
    """(meta, rows by data type, the op columns) of one rank's run; nothing is written."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    meta = _read_meta(run_dir)
    _check_event_files(run_dir)
    acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    # (type) -> (vpp, name, step, micro, key) -> {op: value}
    rows: Dict[str, Dict[tuple, Dict[str, float]]] = defaultdict(dict)
    ops_seen = set()
    for tag in acc.Tags().get("scalars", []):
        parts = parse_tag(tag)
        if parts is None or parts.base_metric not in CSV_TYPES:
            continue
        data_type, suffix = CSV_TYPES[parts.base_metric]
        vpp, name, micro = split_name(parts.name)
        index = parts.metric.partition(".")[2]
        row_name = name + suffix + (f"_{index}" if index else "")
        key = f"{parts.name}/{parts.metric}"
        ops_seen.add(parts.op)
        for ev in acc.Scalars(tag):
            rows[data_type].setdefault((ev.step, vpp, row_name, micro, key), {})[parts.op] = ev.value
    if not rows:
        raise TbprobeError(f"{run_dir}: no monitor scalars to export")
    # columns in the order the config listed the statistics, as the reference writes them (monitor_meta.json's
    # ops_order; a run written before it was kept, in OPS' order)
    order = meta.get("ops_order")
    order = [op for op in order if op in OPS] if isinstance(order, list) else []
    ops = [op for op in dict.fromkeys(order) if op in ops_seen] + [op for op in OPS if op in ops_seen and op not in order]
    return meta, rows, ops


def _write_run(read: tuple, out_dir: str, written: List[str], created: Optional[List[str]] = None) -> None:
    """Write one run's CSV files into ``out_dir``, each through a temporary file; ``written`` gets each path,
    ``created`` the ones that did not exist before (what a failed export removes: never an earlier export's)."""
    meta, rows, ops = read
    shapes = meta.get("shapes")
    shapes = shapes if isinstance(shapes, dict) else {}
    os.makedirs(out_dir, exist_ok=True)
    for data_type, table in sorted(rows.items()):
        steps = [k[0] for k in table]
        path = os.path.join(out_dir, f"{data_type}_{min(steps)}-{max(steps)}.csv")
        # (the activations always have the column, as the reference writes them; the unreduced weight gradients
        # when recorded per micro step, monitor_mbs_grad)
        micro_col = data_type in _MICRO_TYPES or any(":micro" in k[4].rpartition("/")[0] for k in table)
        header = ["vpp_stage", "name", "step"] + (["micro_step"] if micro_col else [])
        tmp = path + ".tmp"
        existed = os.path.lexists(path)
        try:
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(header + ops + ["shape", "dtype"])
                for (step, vpp, row_name, micro, key), values in sorted(table.items(), key=lambda kv: kv[0][:4]):
                    shape, dtype = _shape_dtype(shapes, key)
                    line = [vpp, row_name, step] + ([micro] if micro_col else [])
                    line += [_fmt(values[op]) if op in values else "nan" for op in ops]
                    line += [shape, dtype]
                    w.writerow(line)
            os.replace(tmp, path)
        except BaseException:
            _unlink(tmp)
            raise
        written.append(path)
        if created is not None and not existed:
            created.append(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def export_run(run_dir: str, out_dir: str) -> List[str]:
    """Write the CSV files of one rank's run into ``out_dir``; returns the files written."""
    written: List[str] = []
    _write_run(_read_run(run_dir), out_dir, written)
    return written


def _check_out_root(out_root: str) -> None:
    here = os.path.abspath(out_root)
    while not os.path.lexists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    if not os.path.isdir(here):
        raise TbprobeError(f"{out_root}: cannot write there ({here} is not a folder)")


def _made_folders(out_root: str, target: str) -> List[str]:
    """The folders from ``target`` up to (not beyond) the first existing one: what writing there creates."""
    made = []
    here = os.path.abspath(target)
    while not os.path.lexists(here) and os.path.dirname(here) != here:
        made.append(here)
        here = os.path.dirname(here)
    return made


def export_logdir(logdir: str, out_root: str) -> List[str]:
    """Export every monitor run under ``logdir`` into ``out_root/<job>/<time>-rank<R>-tbprobe/``.

    All or nothing: every run is read before anything is written (a rank whose event files were empty or
    damaged failed the command after the ranks before it were written), and a write that fails removes the
    files and folders this export made."""
    if not os.path.isdir(logdir):
        raise TbprobeError(f"{logdir}: not a folder")
    runs = find_monitor_runs(logdir)
    if not runs:
        raise TbprobeError(f"{logdir}: no tbprobe monitor runs (folders with {META_FILE} and event files)")
    _check_out_root(out_root)
    stamp = time.strftime("%b%d_%H-%M-%S")
    plan = []
    for run in runs:
        rel = os.path.relpath(run, logdir)
        job, _, leaf = rel.rpartition(os.sep)
        rank = leaf[4:] if leaf.startswith("rank") and leaf[4:].isdigit() else "0"
        plan.append((_read_run(run), os.path.join(out_root, job or ".", f"{stamp}-rank{rank}-tbprobe")))
    written: List[str] = []
    created: List[str] = []
    made: List[str] = []
    try:
        for read, target in plan:
            made += _made_folders(out_root, target)
            _write_run(read, target, written, created)
    except BaseException:
        for path in created:
            _unlink(path)
        for folder in sorted(set(made), key=len, reverse=True):   # deepest first; only the ones left empty
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise
    return written
