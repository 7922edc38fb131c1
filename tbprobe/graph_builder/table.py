"""`tbprobe compare`: the node-by-node table with the reference's columns (one row per input / output /
parameter of every debug node, in execution order), from the same match and compare engine as the graph."""
import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from tbprobe.errors import TbprobeError
from tbprobe.formats.dump_dir import discover
from tbprobe.formats.spreadsheet import formula_safe
from tbprobe.graph_builder.compare import compare_entries
from tbprobe.graph_builder.engine import Options, compare_graph_pair, naming_files
from tbprobe.graph_builder.items import flatten_entry, item_strings
from tbprobe.graph_builder.load import load_rank
from tbprobe.graph_builder.match import unused_mapping_rules
from tbprobe.graph_builder.metrics import STAT_FIELDS, TENSOR_FIELDS
from tbprobe.graph_builder.model import Graph
from tbprobe.graph_builder.run import _check_out_dir, pair_rank_dirs

__all__ = ["write_table", "table_rows", "columns_for"]

_HEAD = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
         "NPU Requires_grad", "Bench Requires_grad"]
_STATS_NPU = ["NPU max", "NPU min", "NPU mean", "NPU l2norm"]
_STATS_BENCH = ["Bench max", "Bench min", "Bench mean", "Bench l2norm"]
_TAIL = ["Requires_grad Consistent", "Result", "Err_message", "NPU_Stack_Info"]


def columns_for(mode: str) -> List[str]:
    if mode == "md5":
        return _HEAD + ["NPU MD5", "BENCH MD5"] + _TAIL   # (the reference's spelling, read by name by scripts)
    if mode == "tensor":
        return _HEAD + list(TENSOR_FIELDS) + _STATS_NPU + _STATS_BENCH + _TAIL + ["Data_name"]
    if mode == "structure":
        return _HEAD + _TAIL
    return _HEAD + list(STAT_FIELDS) + _STATS_NPU + _STATS_BENCH + _TAIL


def _dtype(s: Optional[Dict[str, str]]) -> str:
    if not s or _null(s):
        return "N/A"
    d = s.get("dtype", "N/A")
    if d.startswith("<class ") and "'" not in d:
        return "<class '" + d[7:-1] + "'>"
    return d


_DIFFS = ("Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr",
          "NormRelativeErr")
_STATS = ("NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm")


def _null(s: Dict[str, str]) -> bool:
    """Whether an item's strings are those of a None value."""
    return s.get("value") == "null" and len(s) == 1


def table_rows(debug: Graph, bench: Graph, mode: str) -> List[List[str]]:
    rows: List[List[str]] = []
    cols = columns_for(mode)
    entries = [n for n in debug.nodes.values() if n.has_entry and n.exec_order is not None]
    entries.sort(key=lambda n: n.exec_order)
    for node in entries:
        b = node.match
        entry = node.entry
        if b is not None and (node.input_data is None and node.output_data is None):
            res = compare_entries(node.name, entry, b.name, b.entry, mode, strict_dtype=debug.strict_dtype)
            ind, outd = json.loads(res.input_text), json.loads(res.output_text)
        elif node.input_data is not None or node.output_data is not None:
            ind, outd = json.loads(node.input_data or "{}"), json.loads(node.output_data or "{}")
        else:
            ins, outs = flatten_entry(node.name, entry)
            ind = {k: item_strings(v) for k, v in ins}
            outd = {k: item_strings(v) for k, v in outs}
        b_items: Dict[str, Dict[str, str]] = {}
        if b is not None:
            bi, bo = flatten_entry(b.name, b.entry)
            cut = len(b.name) + 1
            b_items = {k[cut:]: item_strings(v, mode == "md5") for k, v in bi + bo}
        stack = repr(list(node.stack)) if node.stack else "N/A"
        cut_d = len(node.name) + 1
        for key, s in list(ind.items()) + list(outd.items()):
            bs = b_items.get(key[cut_d:]) if b is not None else None
            bname = f"{b.name}.{key[cut_d:]}" if bs is not None else "N/A"
            row = {"NPU Name": key, "Bench Name": bname, "NPU Dtype": _dtype(s), "Bench Dtype": _dtype(bs),
                   "NPU Tensor Shape": s.get("shape", "N/A"), "Bench Tensor Shape": bs.get("shape", "N/A") if bs else "N/A",
                   "NPU Requires_grad": s.get("requires_grad", "N/A"),
                   "Bench Requires_grad": bs.get("requires_grad", "N/A") if bs else "N/A",
                   "NPU max": s.get("Max", "N/A"), "NPU min": s.get("Min", "N/A"), "NPU mean": s.get("Mean", "N/A"),
                   "NPU l2norm": s.get("Norm", "N/A"), "NPU MD5": s.get("md5", "N/A"),
                   "NPU_Stack_Info": stack,
                   # both sides' files, as the reference writes them ("-1": none)
                   "Data_name": str([s.get("data_name", "-1"), (bs or {}).get("data_name", "-1")])}
            if bs:
                row.update({"Bench max": bs.get("Max", "N/A"), "Bench min": bs.get("Min", "N/A"),
                            "Bench mean": bs.get("Mean", "N/A"), "Bench l2norm": bs.get("Norm", "N/A"),
                            "BENCH MD5": bs.get("md5", "N/A")})
            if _null(s) and bs is not None and _null(bs):
                # None on both sides (an embedding's padding_idx, a past_key_values left out): the same value, a
                # pass with no differences, as the reference's table writes it (was a row of N/A), in every mode
                if mode == "statistics":
                    row.update(dict.fromkeys(_DIFFS, "0"))
                    row.update(dict.fromkeys(_STATS, "None"))
                row.update({"Requires_grad Consistent": "True", "Result": "pass", "Err_message": "[]"})
            for f in cols:
                if f in s and f not in row:
                    row[f] = s[f]
            stack = "N/A"  # the reference prints a node's stack on its first row only
            rows.append([row.get(c, "N/A") for c in cols])
    return rows


def write_table(debug: str, bench: str, out_dir: str, *, xlsx: bool = False, fuzzy: bool = False,
                layer_mapping: Optional[Mapping] = None, align: bool = True,
                manual: Optional[Mapping[str, str]] = None, strict_dtype: bool = False) -> Tuple[Path, int]:
    """Write compare_result_<ts>.csv (or .xlsx); several steps/ranks go into one file with Step/Rank columns
    in front. Returns (path, number of data rows)."""
    out = _check_out_dir(out_dir)
    pairs = pair_rank_dirs(discover(debug), discover(bench), debug, bench)
    opts = Options(fuzzy=fuzzy, align=align, layer_map=layer_mapping, manual=manual, strict_dtype=strict_dtype)
    all_rows: List[List[str]] = []
    header: Optional[List[str]] = None
    multi = len(pairs) > 1
    unused: Optional[set] = None
    for d_dir, b_dir in pairs:
        dg, bg = load_rank(d_dir, "NPU"), load_rank(b_dir, "Bench")  # type: ignore[arg-type]
        with naming_files(dg, bg):   # (a bad entry found in the row work: its file named)
            mode = compare_graph_pair(dg, bg, opts)
            if layer_mapping:
                rank_unused = set(unused_mapping_rules(layer_mapping, dg, bg))
                unused = rank_unused if unused is None else unused & rank_unused
            cols = columns_for(mode)
            if header is None:
                header = (["Step", "Rank"] if multi else []) + cols
            for row in table_rows(dg, bg, mode):
                all_rows.append(([str(d_dir.step), str(d_dir.rank)] if multi else []) + row)
    created = not out.exists()
    _check_out_dir(out_dir, create=True)
    ts = time.strftime("%Y%m%d%H%M%S")
    path = out / f"compare_result_{ts}.{'xlsx' if xlsx else 'csv'}"
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    try:
        if xlsx:
            _write_xlsx(tmp, header or [], all_rows)
        else:
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(header or [])
                writer.writerows([formula_safe(v) for v in row] for row in all_rows)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if created:     # (a folder this run made, left empty)
            try:
                out.rmdir()
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise TbprobeError(f"{path}: cannot write the table ({exc.strerror})") from None
        raise
    for text in sorted(unused or ()):
        print(f"warning: {text}", file=sys.stderr)
    return path, len(all_rows)


def _write_xlsx(path: Path, header: List[str], rows: List[List[str]]) -> None:
    try:
        from openpyxl import Workbook
    except ImportError:
        raise TbprobeError("--xlsx needs openpyxl: pip install openpyxl") from None
    wb = Workbook(write_only=True)
    ws = wb.create_sheet("Sheet1")   # (the reference's sheet)
    ws.append(header)
    for row in rows:
        ws.append([_cell(v) for v in row])
    wb.save(str(path))


def _cell(value: str):
    """A spreadsheet cell: numbers as numbers and True/False as booleans (so columns sort and filter as the
    reference's do), the rest as written ("N/A", "12.5%", names)."""
    if value in ("True", "False"):
        return value == "True"
    try:
        number = float(value)
    except ValueError:
        return formula_safe(value)
    return number if value.strip().lower() not in ("nan", "inf", "-inf", "infinity", "-infinity") else value
