"""The compare dashboard's table: one row per compared input, output or parameter of every debug node.

Built once per graph from the stored data (cached on the opened file), then filtered, sorted and paged per
request; the same rows export to CSV. Values keep their stored text except numbers (see node_detail); sorting
is numeric where the text is a number or a percentage.
"""
import csv
import io
import math
import sys
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tbprobe.formats.spreadsheet import formula_safe
from tbprobe.tb_plugin.node_detail import split_params

__all__ = ["BASE_COLUMNS", "TableRows", "build_rows", "sort_key_number", "to_csv"]

BASE_COLUMNS = ["node", "order", "precision", "io", "key"]


def sort_key_number(value) -> Optional[float]:
    """A number for sorting (percentages too), or None for text and missing values."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, str):
        text = value.strip().rstrip("%")
        try:
            number = float(text)
        except ValueError:
            return None
        return None if math.isnan(number) else number
    return None


class TableRows:
    def __init__(self, rows: List[dict], columns: List[str]):
        self.rows = rows
        self.columns = columns
        self._bytes: Optional[int] = None

    def __len__(self) -> int:
        return len(self.rows)

    def memory_estimate(self) -> int:
        """About how many bytes the rows hold (for the open-file budget, graph_files.py): each row's dict and its
        values, the node name aside (shared by the rows of a node). Measured once: the rows do not change."""
        if self._bytes is None:
            size = sys.getsizeof
            self._bytes = size(self.rows) + sum(
                size(row) + sum(size(v) for k, v in row.items() if k != "node") for row in self.rows)
        return self._bytes


def build_rows(data: Iterable[Tuple[str, int, dict, dict]], precision_of) -> TableRows:
    rows: List[dict] = []
    columns: Dict[str, None] = {c: None for c in BASE_COLUMNS}
    for name, order, inp, outp in data:
        params = split_params(name, inp, outp)
        prec = precision_of(name)
        for io_kind in ("inputs", "outputs", "parameters"):
            for param in params[io_kind]:
                row = {"node": name, "order": order, "precision": prec, "io": io_kind[:-1], "key": param["key"]}
                for field, value in param["fields"].items():
                    if field in row:
                        continue
                    row[field] = value
                    columns.setdefault(field, None)
                rows.append(row)
    return TableRows(rows, list(columns))


def to_csv(rows: Sequence[dict], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else formula_safe(str(row.get(c))) for c in columns])
    return buf.getvalue()

