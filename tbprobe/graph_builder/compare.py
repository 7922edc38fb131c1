"""Node-by-node comparison of matched nodes (REFERENCE.md section 4): item fields, item and node rules, the
precision index (0 pass, 0.5 warning, 1 error).

Inputs and outputs of the two nodes are paired by their key after the node name ("input.0", "input.dim",
"parameters.weight", "output.1"): by position for positional arguments and by name for keyword arguments."""
import json
import math
import re
from typing import Callable, Dict, List, Optional, Tuple

from tbprobe.graph_builder.dtypes import mixed_precision
from tbprobe.graph_builder.fast_path import compare_stats
from tbprobe.graph_builder.items import data_text, fields_text, flatten_entry, is_tensor_item, item_text
from tbprobe.graph_builder.metrics import (
    STAT_FIELDS,
    md5_of,
    na_tensor_fields,
    norm_warns,
    stat_fields,
    unsupported_tensor_fields,
)

__all__ = ["MODES", "compare_entries", "Compared", "precision_of", "api_base_name", "RESULT_INDEX", "TensorLookup",
           "outside_the_node_rules", "no_longer_passes"]

MODES = ("statistics", "md5", "tensor", "structure")
RESULT_INDEX = {"pass": 0, "warning": 0.5, "error": 1}
_RANK = {"pass": 0, "warning": 1, "error": 2}

# APIs whose outputs are uninitialised or pure conversions: their differences mean nothing.
_EXEMPT = re.compile(r"^(empty|empty_like|to|numpy|__setitem__|new_empty.*|empty_strided)$")
# Collectives whose inputs are placeholders: input-based rules do not apply.
_PLACEHOLDER_INPUTS = {"_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv",
                       "reduce_scatter_tensor", "all_gather_into_tensor"}
_API_NAME = re.compile(r"^[A-Za-z]+\.(.+)\.\d+\.(forward|backward)$")

MSG_MD5 = "error: The CRC-32 value of NPU differs from that of the bench."
MSG_MD5_MISSING = "warning: The CRC-32 value is missing on one side."
MSG_NORM_ERR = "error: The NormRelativeErr of output is greater than 0.5."
MSG_NORM_WARN = "warning: The norm relative error of output is 10 times that of input."
MSG_RATIO = "error: The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.6."
MSG_COSINE = "warning: The input/parameters of Cosine > 0.9 while the output Cosine drops by more than 0.1."
MSG_INF = "error: NPU Max or Min is inf/nan while the bench's is finite."
MSG_DTYPE = "error: The dtype of NPU differs from that of the bench."
# two floating-point dtypes (bf16 against fp32: mixed precision, the product's first use case) are no error by
# themselves: the item is graded by the numeric rules and says why its dtypes differ (dtypes.py); with
# strict_dtype (`--strict-dtype`) every dtype difference is MSG_DTYPE's error, as in the reference
MSG_DTYPE_NOTE = ("note: The dtype of NPU differs from that of the bench (both floating point: mixed precision); "
                  "graded by the numeric rules.")
MSG_SHAPE = "error: The shape of NPU differs from that of the bench."
MSG_GRAD = "error: requires_grad of NPU differs from that of the bench."
MSG_SCALAR = "error: The value of a non-tensor argument differs from that of the bench."
# an argument one side gives and the other does not (a keyword on one side only, None against a tensor): the call
# differs there (F.gelu(x, approximate="tanh") against F.gelu(x) moves its output by 1e-4 alone, and nothing
# downstream fails)
MSG_ONE_SIDED = "error: The argument is given on one side only (absent or None on the other)."
# the messages of the statistics fast path (fast_path.compare_stats), in the order it takes them; the last is
# the mixed-precision note, None with strict_dtype (every dtype difference an error)
_FAST_MSGS = (MSG_DTYPE, MSG_SHAPE, MSG_GRAD, MSG_INF, MSG_SCALAR, MSG_NORM_ERR, MSG_NORM_WARN, MSG_DTYPE_NOTE)
_FAST_MSGS_STRICT = _FAST_MSGS[:7] + (None,)

# (debug node name, param key suffix) -> (tensor fields, message) computed in the process pool
TensorLookup = Callable[[str], Optional[Tuple[Dict[str, str], Optional[str]]]]


def api_base_name(name: str) -> Optional[str]:
    m = _API_NAME.match(name)
    return m.group(1) if m else None


def precision_of(result: Optional[str]) -> Optional[float]:
    return None if result is None else RESULT_INDEX[result]


def _worse(a: str, b: str) -> str:
    return a if _RANK[a] >= _RANK[b] else b


_ENC = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
_STAT_TEMPLATE = (', "Max diff": "%s", "Min diff": "%s", "Mean diff": "%s", "L2norm diff": "%s", '
                  '"MaxRelativeErr": "%s", "MinRelativeErr": "%s", "MeanRelativeErr": "%s", "NormRelativeErr": "%s", '
                  '"Requires_grad Consistent": "%s", "Result": "%s", "Err_message": %s')


class _Item:
    __slots__ = ("key", "is_output", "d", "b", "base", "fields", "result", "msgs", "nre", "ratio", "cos")

    def __init__(self, key, is_output, d, b, base):
        self.key = key
        self.is_output = is_output
        self.d = d
        self.b = b
        self.base = base          # JSON members of the dump fields
        self.fields: Dict[str, str] = {}
        self.result = "pass"
        self.msgs: List[str] = []
        self.nre = None
        self.ratio = None
        self.cos = None

    def flag(self, level: str, msg: str) -> None:
        self.result = _worse(self.result, level)
        if msg not in self.msgs:
            self.msgs.append(msg)

    def text(self, mode: str) -> str:
        grad = self.fields.pop("Requires_grad Consistent", "N/A")
        err = json.dumps(self.msgs) if self.msgs else "[]"
        f = self.fields
        if mode == "statistics" and len(f) == 8:
            # one formatting operation for the common case; these values never need JSON escapes
            return self.base + _STAT_TEMPLATE % (
                f["Max diff"], f["Min diff"], f["Mean diff"], f["L2norm diff"], f["MaxRelativeErr"],
                f["MinRelativeErr"], f["MeanRelativeErr"], f["NormRelativeErr"], grad, self.result,
                _ENC(err))
        if mode == "md5":
            tail = {"Result": self.result, "Requires_grad Consistent": grad, "Err_message": err}
        else:
            tail = dict(self.fields)
            tail["Requires_grad Consistent"] = grad
            tail["Result"] = self.result
            tail["Err_message"] = err
        return self.base + ", " + fields_text(tail)


def _nonfinite(v) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def _item_checks(it: _Item, mode: str, strict_dtype: bool = False) -> None:
    d, b = it.d, it.b
    if mode == "md5":
        md, mb = md5_of(d), md5_of(b)
        if md is None or mb is None:
            it.flag("warning", MSG_MD5_MISSING)
        elif md != mb:
            it.flag("error", MSG_MD5)
        return
    if is_tensor_item(d) and is_tensor_item(b):
        if d.get("dtype") != b.get("dtype"):
            if not strict_dtype and mixed_precision(d.get("dtype"), b.get("dtype")):
                it.flag("pass", MSG_DTYPE_NOTE)
            else:
                it.flag("error", MSG_DTYPE)
        if d.get("shape") != b.get("shape"):
            it.flag("error", MSG_SHAPE)
        if d.get("requires_grad") != b.get("requires_grad"):
            it.flag("error", MSG_GRAD)
        for stat in ("Max", "Min"):
            dv, bv = d.get(stat), b.get(stat)
            if _nonfinite(dv) and isinstance(bv, (int, float)) and not _nonfinite(bv):
                it.flag("error", MSG_INF)
    elif "value" in d and "value" in b:
        if type(d.get("value")) is type(b.get("value")) and d.get("value") != b.get("value"):
            dv, bv = d.get("value"), b.get("value")
            if not (isinstance(dv, float) and math.isnan(dv) and isinstance(bv, float) and math.isnan(bv)):
                it.flag("error", MSG_SCALAR)


def _fields_for(it: _Item, mode: str, tensor_lookup: Optional[TensorLookup]) -> Dict[str, str]:
    """The mode's compare fields of one item (a fresh dict: the caller adds to it)."""
    d, b = it.d, it.b
    if mode == "statistics":
        if b is None:
            return {k: "N/A" for k in STAT_FIELDS}
        fields, nre = stat_fields(d, b)
        it.nre = nre
        return fields
    if mode == "tensor":
        if b is None or not is_tensor_item(d) or not is_tensor_item(b):
            return unsupported_tensor_fields() if b is not None else na_tensor_fields()
        found = tensor_lookup(it.key) if tensor_lookup else None
        if found is None:
            return na_tensor_fields()
        fields, msg = found
        fields = dict(fields)
        if msg:
            it.flag("error" if msg.startswith("error") else "warning", msg)
        ratio = fields.get("One Thousandth Err Ratio")
        cos = fields.get("Cosine")
        it.ratio = _as_float(ratio)
        it.cos = _as_float(cos)
        return fields
    return {}


def _as_float(text: Optional[str]) -> Optional[float]:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class Compared:
    """The result of comparing one node: precision index, the debug side's input_data / output_data as JSON text
    (dump fields + compare fields), a worst metric for colouring, and whether every input still passed."""

    __slots__ = ("precision", "input_text", "output_text", "metric", "inputs_ok", "bench_texts")

    def __init__(self, precision, input_text, output_text, metric=None, inputs_ok=True):
        self.precision = precision
        self.input_text = input_text
        self.output_text = output_text
        self.metric = metric
        self.inputs_ok = inputs_ok
        # (input_data, output_data) of the bench node's own row, when asked for and the bench entry was read
        self.bench_texts: Optional[Tuple[str, str]] = None


def outside_the_node_rules(name: str) -> bool:
    """Whether the node rules skip `name`: an API whose output differs by nature (uninitialised memory: empty,
    new_empty, to...) or whose inputs are placeholders (a collective's output buffers)."""
    api = api_base_name(name)
    short = api.rsplit(".", 1)[-1] if api else ""
    return bool(api) and (bool(_EXEMPT.match(short)) or short in _PLACEHOLDER_INPUTS)


def compare_entries(debug_name: str, debug_entry: Optional[dict], bench_name: str, bench_entry: Optional[dict],
                    mode: str, tensor_lookup: Optional[TensorLookup] = None, bench_texts: bool = False,
                    strict_dtype: bool = False) -> Compared:
    """Compare two dump entries (the debug node's and the bench node's). With `bench_texts`, the bench node's
    row texts are made from the same flattened items (saves flattening its entry a second time). With
    `strict_dtype`, two floating-point dtypes that differ are an error, as in the reference (else a note)."""
    api = api_base_name(debug_name)
    short = api.rsplit(".", 1)[-1] if api else ""
    exempt = bool(api and _EXEMPT.match(short))
    placeholder = short in _PLACEHOLDER_INPUTS
    if mode == "statistics" and debug_entry and bench_entry:
        fast = compare_stats(debug_name, debug_entry, bench_name, bench_entry, exempt, placeholder,
                             _FAST_MSGS_STRICT if strict_dtype else _FAST_MSGS, bench_texts)
        if fast is not None:
            res = Compared(*fast[:5])
            res.bench_texts = fast[5]
            return res
    with_md5 = mode == "md5"
    d_in, d_out = flatten_entry(debug_name, debug_entry)
    if mode == "structure" or (not d_in and not d_out):
        return Compared(None, data_text([(k, item_text(v, with_md5)) for k, v in d_in]),
                        data_text([(k, item_text(v, with_md5)) for k, v in d_out]))
    b_in, b_out = flatten_entry(bench_name, bench_entry)
    b_texts = None
    if bench_texts:
        b_texts = (data_text([(k, item_text(v, with_md5)) for k, v in b_in]),
                   data_text([(k, item_text(v, with_md5)) for k, v in b_out]))
    cut_b = len(bench_name) + 1
    b_map = {k[cut_b:]: v for k, v in b_in}
    for k, v in b_out:
        b_map[k[cut_b:]] = v
    cut_d = len(debug_name) + 1

    items: List[_Item] = []
    members_in: List[Tuple[str, object]] = []
    members_out: List[Tuple[str, object]] = []
    one_sided: List[_Item] = []
    # the bench's forward arguments the debug call lacks, when both calls' arguments were recorded (a bench node
    # without data, or with its inputs left out by data_mode, says nothing of its arguments); None: no such rule
    bench_only = _bench_only_arguments(debug_name, d_in, bench_entry, b_in, cut_d, cut_b) if not exempt else None
    for pairs, is_output, target in ((d_in, False, members_in), (d_out, True, members_out)):
        for key, d in pairs:
            if d is None:
                target.append((key, '"value": "null"'))
                continue
            b = b_map.get(key[cut_d:])
            it = _Item(key, is_output, d, b, item_text(d, with_md5))
            it.fields = _fields_for(it, mode, tensor_lookup)
            if b is None:
                if mode == "md5":
                    it.flag("warning", MSG_MD5_MISSING)
                if bench_only is not None and not is_output and ".parameters." not in key and \
                        not _given_elsewhere(d, bench_only):
                    it.flag("error", MSG_ONE_SIDED)
                    one_sided.append(it)
            elif not exempt:
                _item_checks(it, mode, strict_dtype)
            it.fields["Requires_grad Consistent"] = _grad_consistent(d, b)
            target.append((key, it))
            items.append(it)

    if not items:
        res = Compared(None, data_text([(k, m) for k, m in members_in]),  # type: ignore[misc]
                       data_text([(k, m) for k, m in members_out]))  # type: ignore[misc]
        res.bench_texts = b_texts
        return res
    if not exempt:
        _node_rules(items, mode, placeholder)
        if bench_only:   # (the other way round: on the node's main item)
            target = next((it for it in items if it.is_output), items[-1])
            target.flag("error", MSG_ONE_SIDED)
            one_sided.append(target)
    result = "pass"
    inputs_ok = True
    for it in items:
        result = _worse(result, it.result)
        # (an argument on one side only is where the difference enters, as a differing parameter is)
        if not it.is_output and ".parameters." not in it.key and it not in one_sided and _input_fails(it):
            inputs_ok = False

    def render(members):
        return data_text([(k, m.text(mode) if isinstance(m, _Item) else m) for k, m in members])

    res = Compared(RESULT_INDEX[result], render(members_in), render(members_out), _worst_metric(items, mode),
                   inputs_ok)
    res.bench_texts = b_texts
    return res


_ARGUMENTS = ("input_args", "input_kwargs")
_SAME_FIELDS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "value")


def _bench_only_arguments(debug_name: str, d_in: list, bench_entry: Optional[dict], b_in: list, cut_d: int,
                          cut_b: int) -> Optional[List[dict]]:
    """The bench's items of forward arguments (not parameters) that the debug call leaves out or passes as None;
    None where the rule does not apply: a backward record (a gradient that is None on one side is no argument),
    or a bench entry that recorded no arguments."""
    if ".forward" not in debug_name or not bench_entry or not any(k in bench_entry for k in _ARGUMENTS):
        return None
    given = {k[cut_d:] for k, v in d_in if v is not None}
    return [v for k, v in b_in if v is not None and ".parameters." not in k and k[cut_b:] not in given]


def _given_elsewhere(item: dict, bench_only: List[dict]) -> bool:
    """Whether the bench gives `item`'s argument under another slot (a keyword for a position, or the other way
    round: F.gelu(x, "none") against F.gelu(x, approximate="none")): the same value, or a tensor of the same type,
    dtype, shape and statistics. That bench item is then taken, no longer one-sided either."""
    for i, b in enumerate(bench_only):
        if isinstance(b, dict) and all(item.get(f) == b.get(f) for f in _SAME_FIELDS):
            del bench_only[i]
            return True
    return False


def no_longer_passes(result: str, nre: Optional[float], cosine: Optional[float]) -> bool:
    """An input that no longer passes (the first divergence's test, and the plugin's reading of stored rows):
    flagged (`result` not "pass"), or its NormRelativeErr (a fraction: 0.1 is 10 %) at 10 % or its cosine under
    0.99. NaN passes both bounds."""
    return result != "pass" or (nre is not None and nre >= 0.1) or (cosine is not None and cosine < 0.99)


def _input_fails(it: _Item) -> bool:
    return no_longer_passes(it.result, it.nre, it.cos)


def failing_inputs(debug_name: str, debug_entry: Optional[dict], bench_name: str, bench_entry: Optional[dict],
                   mode: str, strict_dtype: bool = False) -> List[Tuple[str, dict]]:
    """(slot, debug item) of each input that no longer passes, by compare_entries' test of inputs_ok (parameters
    aside; no cosine, which needs the tensors); the slot as dataflow.json names it ("1", "0.2", a keyword)."""
    return [(key.split(".", 1)[-1], d)   # ("input.1.0" -> "1.0")
            for key, d in _failing_items(debug_name, debug_entry, bench_name, bench_entry, mode, False,
                                         strict_dtype)]


def failing_outputs(debug_name: str, debug_entry: Optional[dict], bench_name: str, bench_entry: Optional[dict],
                    mode: str, strict_dtype: bool = False) -> List[Tuple[str, dict]]:
    """(key after the node name, "output.0", debug item) of each output that no longer passes by the same test
    as failing_inputs' (its own item checks, a NormRelativeErr at 10 %: an output carried in fails too)."""
    return _failing_items(debug_name, debug_entry, bench_name, bench_entry, mode, True, strict_dtype)


def _failing_items(debug_name: str, debug_entry: Optional[dict], bench_name: str, bench_entry: Optional[dict],
                   mode: str, outputs: bool, strict_dtype: bool = False) -> List[Tuple[str, dict]]:
    if not debug_entry or not bench_entry:
        return []
    side = 1 if outputs else 0
    d_items = flatten_entry(debug_name, debug_entry)[side]
    b_items = flatten_entry(bench_name, bench_entry)[side]
    cut_d, cut_b = len(debug_name) + 1, len(bench_name) + 1
    b_map = {k[cut_b:]: v for k, v in b_items}
    out = []
    for key, d in d_items:
        b = b_map.get(key[cut_d:])
        if d is None or b is None or ".parameters." in key:
            continue
        it = _Item(key, outputs, d, b, "")
        it.fields = _fields_for(it, mode, None)
        _item_checks(it, mode, strict_dtype)
        if _input_fails(it):
            out.append((key[cut_d:], d))
    return out


def _grad_consistent(d: dict, b: Optional[dict]) -> str:
    if b is None:
        return "N/A"
    return "True" if d.get("requires_grad") == b.get("requires_grad") else "False"


def _node_rules(items: List[_Item], mode: str, placeholder: bool) -> None:
    ins = [it for it in items if not it.is_output]
    outs = [it for it in items if it.is_output]
    target = outs[0] if outs else (ins[-1] if ins else None)
    if target is None:
        return
    if mode == "statistics" and not placeholder:
        in_nre = [it.nre for it in ins if it.nre is not None]
        out_nre = [it.nre for it in outs if it.nre is not None]
        if out_nre:
            # inputs without a NormRelativeErr (a Norm of 0 on both sides, an integer input's null Norm) count as
            # 0, as the reference counts N/A: an output error of such a node was never flagged
            worst_in = max(in_nre, default=0.0)
            if worst_in < 0.1:
                # each output past the bound, as the reference's RelativeErrChecker (the warning below goes on
                # the first output, as its RelativeWarnChecker)
                for it in outs:
                    if it.nre is not None and it.nre > 0.5:
                        it.flag("error", MSG_NORM_ERR)
            if norm_warns(worst_in, max(out_nre)):
                target.flag("warning", MSG_NORM_WARN)
    elif mode == "tensor" and not placeholder:
        in_ratio = [it.ratio for it in ins if it.ratio is not None]
        out_ratio = [it.ratio for it in outs if it.ratio is not None]
        if in_ratio and out_ratio and min(in_ratio) > 0.9 and min(out_ratio) < 0.6:
            target.flag("error", MSG_RATIO)
        in_cos = [it.cos for it in ins if it.cos is not None]
        out_cos = [it.cos for it in outs if it.cos is not None]
        if in_cos and out_cos and min(in_cos) > 0.9 and min(in_cos) - min(out_cos) > 0.1:
            target.flag("warning", MSG_COSINE)


def _worst_metric(items: List[_Item], mode: str) -> Optional[float]:
    """One number per node for colouring by metric: worst output NormRelativeErr (statistics) or cosine loss
    (tensor)."""
    if mode == "statistics":
        values = [it.nre for it in items if it.is_output and it.nre is not None]
        return max(values) if values else None
    if mode == "tensor":
        values = [1.0 - it.cos for it in items if it.is_output and it.cos is not None]
        return max(values) if values else None
    return None
