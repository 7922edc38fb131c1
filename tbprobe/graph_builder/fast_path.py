"""The common case, without the general machinery: entries whose arguments are flat lists (and keyword dicts) of
plain tensor items and plain scalars, in build texts and in statistics-mode compares.

A 100k-entry dump is nearly all such entries, and the general path (flatten_entry -> (key, item) pairs ->
_Item objects -> field dicts -> text) spends most of its time on objects that only live for one item. These
functions make the same bytes in one pass per entry; anything they do not handle (nesting, parameters_grad,
mixed tensor/scalar pairs, non-standard items) returns None and the caller takes the general path.

Most of the work is done in C (_rowtext.c): a node's own texts (entry_texts; rows.own_texts also reads them
straight from the entry's JSON text) and the statistics compare of float statistics and plain scalars
(compare_plain). compare_stats's Python below takes what the C compare hands back (ints or bools among the
statistics, big ints) before the general path does.
tests/graph_builder/test_fast_path.py checks both paths give identical text on varied and hostile entries."""
import json
from functools import partial
from math import isfinite
from typing import List, Optional, Tuple

from tbprobe.graph_builder import _rowtext
from tbprobe.graph_builder.dtypes import mixed_precision
from tbprobe.graph_builder.items import is_std_item, item_text, std_text
from tbprobe.graph_builder.metrics import _stat, norm_warns

__all__ = ["entry_texts", "compare_stats"]

_enc = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
_LIST_KEYS = ("input_args", "input")
_DICT_KEYS = (("input_kwargs", "input."), ("parameters", "parameters."))
_NULL = '"value": "null"'


def _plain(pairs: List[tuple], items, prefix: str) -> bool:
    """Append (prefix + key, item) for each (key, item); False at the first one that is neither None nor a plain
    item (a nested argument: the general path's business)."""
    for key, item in items:
        if item is None or (type(item) is dict and "type" in item):
            pairs.append((prefix + str(key), item))
        else:
            return False
    return True


def _pairs(entry: dict) -> Optional[Tuple[List[tuple], List[tuple]]]:
    """(inputs, outputs) as (key suffix after the node name, item or None), in flatten_entry's order, or None
    when an argument is nested (a list or a dict of tensors), the output is not a list, or a container is of
    another type (`"output": 7`: flatten_entry's message; it read as no outputs, and compared as a pass)."""
    ins: List[tuple] = []
    for key in _LIST_KEYS:
        value = entry.get(key)
        if type(value) is list:
            if not _plain(ins, enumerate(value), "input."):
                return None
        elif value is not None:
            return None
    for key, prefix in _DICT_KEYS:
        value = entry.get(key)
        if value is not None and (type(value) is not dict or not _plain(ins, value.items(), prefix)):
            return None
    outs: List[tuple] = []
    value = entry.get("output")
    if type(value) is list:
        if not _plain(outs, enumerate(value), "output."):
            return None
    elif value is not None:
        return None
    return ins, outs


# entry_texts(name, entry, with_md5) -> (input_data, output_data) text of a node's own entry (no compare
# fields), or None for the general path; items the C code does not format itself go to items.item_text
entry_texts = partial(_rowtext.entry_texts, item_text)


def _is_scalar(item: dict) -> bool:
    if len(item) != 2 or type(item.get("type")) is not str or "value" not in item:
        return False
    t = type(item["value"])
    return t is int or t is float or t is bool


_DIFFS = (', "Max diff": "%s", "Min diff": "%s", "Mean diff": "%s", "L2norm diff": "%s", '
          '"MaxRelativeErr": "%s", "MinRelativeErr": "%s", "MeanRelativeErr": "%s", "NormRelativeErr": "%s"')
_TAIL = ', "Requires_grad Consistent": "%s", "Result": "%s", "Err_message": %s'
_RANK = {"pass": 0, "warning": 1, "error": 2}
_INDEX = {"pass": 0, "warning": 0.5, "error": 1}
_NO_MSGS = '"[]"'

# _float_slot(key, is_output, d, b): the compare slot of two statistics items whose statistics are all floats
# (shapes lists of ints), made in C without metrics._stat and the separate std_text (the same text), or None.
# Slot: [key, is_output, base text, diffs text, NormRelativeErr, grad, result, msgs, not all Max/Min diffs finite]
_float_slot = _rowtext.float_slot
_compare_plain = _rowtext.compare_plain


def _flag(slot: list, level: str, msg: str) -> None:
    if _RANK[level] > _RANK[slot[6]]:
        slot[6] = level
    msgs = slot[7]
    if msgs is None:
        slot[7] = [msg]
    elif msg not in msgs:
        msgs.append(msg)


def _flag_dtype(slot: list, d_dtype, b_dtype, m_dtype: str, m_note: Optional[str]) -> None:
    """Two differing dtypes: a note when both are floating point (mixed precision, compare.MSG_DTYPE_NOTE), else
    (or with strict_dtype, m_note None) the error."""
    if m_note is not None and mixed_precision(d_dtype, b_dtype):
        _flag(slot, "pass", m_note)
    else:
        _flag(slot, "error", m_dtype)


def _bad_stat(dv, bv) -> bool:
    """Debug Max/Min inf or nan while the bench's is a finite number."""
    return type(dv) is float and not isfinite(dv) and isinstance(bv, (int, float)) and \
        not (type(bv) is float and not isfinite(bv))


def compare_stats(debug_name: str, de: dict, bench_name: str, be: Optional[dict], exempt: bool, placeholder: bool,
                  msgs_of, bench_texts: bool):
    """Statistics-mode compare of two entries made of plain items: (precision, input text, output text, worst
    output NormRelativeErr, inputs ok, bench texts or None), or None for the general path. `msgs_of` holds the
    general path's messages (compare.py), so both paths say the same words; its eighth, the mixed-precision
    note, is None with strict_dtype."""
    if ".parameters_grad" in debug_name or ".parameters_grad" in bench_name or be is None:
        return None
    # the common case in C: float statistics and plain scalars; the rest (ints or bools in statistics, big ints)
    # below, which hands back what it does not take either
    fast = _compare_plain(debug_name, de, bench_name, be, exempt, placeholder, msgs_of, bench_texts, item_text)
    if fast is not None:
        return fast
    d_pairs = _pairs(de)
    b_pairs = _pairs(be)
    if d_pairs is None or b_pairs is None:
        return None
    d_in, d_out = d_pairs
    if not d_in and not d_out:
        return None
    b_in, b_out = b_pairs
    given = {suffix for suffix, d in d_in if d is not None}
    if any(b is not None and suffix not in given and not suffix.startswith("parameters.") for suffix, b in b_in):
        return None   # (an argument the bench alone gives: compare.MSG_ONE_SIDED, the general path's)
    b_map = dict(b_in)
    b_map.update(b_out)
    m_dtype, m_shape, m_grad, m_inf, m_scalar = msgs_of[:5]
    m_note = msgs_of[7]   # (None: strict_dtype, every dtype difference an error)
    # one slot per compared debug item: [key, is_output, base text, diffs, NormRelativeErr, grad, result, msgs];
    # a null debug item is its member text
    slots: List[list] = []
    members: Tuple[list, list] = ([], [])
    prefix = debug_name + "."
    for is_output, pairs in ((False, d_in), (True, d_out)):
        target = members[is_output]
        for suffix, d in pairs:
            if d is None:
                target.append(_enc(prefix + suffix) + ": {" + _NULL + "}")
                continue
            b = b_map.get(suffix)
            if b is None:
                return None
            if is_std_item(d) and is_std_item(b):
                slot = _float_slot(prefix + suffix, is_output, d, b)
                if slot is not None:
                    if not exempt:
                        if d["dtype"] != b["dtype"]:
                            _flag_dtype(slot, d["dtype"], b["dtype"], m_dtype, m_note)
                        if d["shape"] != b["shape"]:
                            _flag(slot, "error", m_shape)
                        if slot[5] == "False":
                            _flag(slot, "error", m_grad)
                        if slot[8] and (_bad_stat(d["Max"], b["Max"]) or _bad_stat(d["Min"], b["Min"])):
                            _flag(slot, "error", m_inf)
                    target.append(slot)
                    slots.append(slot)
                    continue
                d0, r0, _ = _stat(d["Max"], b["Max"])
                d1, r1, _ = _stat(d["Min"], b["Min"])
                d2, r2, _ = _stat(d["Mean"], b["Mean"])
                d3, r3, nre = _stat(d["Norm"], b["Norm"])
                dg, bg = d["requires_grad"], b["requires_grad"]
                slot = [prefix + suffix, is_output, std_text(d), _DIFFS % (d0, d1, d2, d3, r0, r1, r2, r3), nre,
                        "True" if dg == bg else "False", "pass", None]
                if not exempt:
                    if d["dtype"] != b["dtype"]:
                        _flag_dtype(slot, d["dtype"], b["dtype"], m_dtype, m_note)
                    if d["shape"] != b["shape"]:
                        _flag(slot, "error", m_shape)
                    if dg != bg:
                        _flag(slot, "error", m_grad)
                    if _bad_stat(d["Max"], b["Max"]) or _bad_stat(d["Min"], b["Min"]):
                        _flag(slot, "error", m_inf)
            elif _is_scalar(d) and _is_scalar(b):
                dv, bv = d["value"], b["value"]
                diff, rel, nre = _stat(dv, bv)
                slot = [prefix + suffix, is_output, item_text(d), _DIFFS % (diff, diff, diff, diff, rel, rel, rel, rel),
                        nre, "True", "pass", None]
                if not exempt and type(dv) is type(bv) and dv != bv and \
                        not (type(dv) is float and dv != dv and bv != bv):
                    _flag(slot, "error", m_scalar)
            else:
                return None
            target.append(slot)
            slots.append(slot)
    if not slots:
        return None
    # None (a text the C code hands back) leaves the bench row to the general path
    b_texts = entry_texts(bench_name, be, False) if bench_texts else None
    return _finish(slots, members, exempt, placeholder, msgs_of) + (b_texts,)


def _finish(slots: List[list], members, exempt: bool, placeholder: bool, msgs_of):
    out_nre = [s[4] for s in slots if s[1] and s[4] is not None]
    if not exempt and not placeholder and out_nre:
        in_nre = [s[4] for s in slots if not s[1] and s[4] is not None]
        target = next((s for s in slots if s[1]), None) or slots[-1]
        # (inputs without a NormRelativeErr count as 0, as the reference counts N/A: compare._node_rules)
        worst_in, worst_out = max(in_nre, default=0.0), max(out_nre)
        if worst_in < 0.1:
            for s in slots:   # (every output past the bound, as the reference's RelativeErrChecker)
                if s[1] and s[4] is not None and s[4] > 0.5:
                    _flag(s, "error", msgs_of[5])
        if norm_warns(worst_in, worst_out):
            _flag(target, "warning", msgs_of[6])
    result = "pass"
    inputs_ok = True
    for s in slots:
        level = s[6]
        if level != "pass" and _RANK[level] > _RANK[result]:
            result = level
        if not s[1] and (level != "pass" or (s[4] is not None and s[4] >= 0.1)) and ".parameters." not in s[0]:
            inputs_ok = False
    texts = []
    for target in members:
        if not target:
            texts.append("{}")
            continue
        parts = []
        for m in target:
            if type(m) is str:
                parts.append(m)
                continue
            err = _enc(json.dumps(m[7])) if m[7] else _NO_MSGS
            parts.append(_enc(m[0]) + ": {" + m[2] + m[3] + _TAIL % (m[5], m[6], err) + "}")
        texts.append("{" + ", ".join(parts) + "}")
    return _INDEX[result], texts[0], texts[1], (max(out_nre) if out_nre else None), inputs_ok
