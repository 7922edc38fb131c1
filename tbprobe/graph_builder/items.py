"""Dump items -> the string dicts stored in tb_nodes.input_data / output_data.

The reference writes every value as a string: floats as Python's repr ("0.1", "inf", "nan"), booleans as
"True"/"False", shapes as "[3, 4]", JSON null as "null", and scalar arguments with their value repeated in the
four statistics fields. `flatten_entry` turns a dump entry into (param_key suffix, item) pairs in the
reference's order; `item_strings` stringifies one item."""
import json
import zlib
from typing import Any, Dict, List, Optional, Tuple

from tbprobe.errors import TbprobeError

__all__ = ["flatten_entry", "item_strings", "to_str", "is_tensor_item", "scalar_md5", "item_text", "fields_text",
           "data_text", "is_std_item", "std_text", "EntryError"]

Pair = Tuple[str, Optional[dict]]


class EntryError(TbprobeError):
    """A dump entry whose arguments are not what a dump holds. Raised deep in the row work, where the file is not
    known: `key` is the entry's name or one of its argument keys (which starts with the name), so the caller
    that holds the graphs names the file (engine.entry_error_in_file)."""

    def __init__(self, key: str, problem: str):
        self.key = key
        self.problem = problem   # 'entry "X": ...' / 'entry argument "X.input.0.0" ...'
        super().__init__(f"dump {problem}")

    def __reduce__(self):
        return (EntryError, (self.key, self.problem))


def _bool_str(value: bool) -> str:
    return "True" if value else "False"


def _none_str(value: None) -> str:
    return "null"


# type -> text conversion; dispatch by exact type is the hot path of writing 100k nodes
_CONV = {float: float.__repr__, int: int.__repr__, str: str.__str__, bool: _bool_str, type(None): _none_str,
         list: str}


def to_str(value: Any) -> str:
    conv = _CONV.get(type(value))
    return conv(value) if conv is not None else str(value)


def is_tensor_item(item: Optional[dict]) -> bool:
    return item is not None and "dtype" in item and "shape" in item and "value" not in item


_MAX_DEPTH = 200   # nested arguments (the decoder takes ~1000 levels, then the recursion here failed: a traceback)


def _flatten(prefix: str, value: Any, out: List[Pair], depth: int = 0) -> None:
    if depth > _MAX_DEPTH:
        raise EntryError(prefix, f'entry argument "{prefix[:120]}..." is nested more than {_MAX_DEPTH} deep')
    depth += 1
    if isinstance(value, list):
        for i, sub in enumerate(value):
            _flatten(f"{prefix}.{i}", sub, out, depth)
    elif isinstance(value, dict) and "class_type" in value and "type" not in value:
        # an object described by its fields (the reference's torch.distributed.P2POp: its tensor, direction, peer,
        # tag and group): the graph shows its tensor
        out.append((prefix, value.get("tensor") if isinstance(value.get("tensor"), dict) else None))
    elif isinstance(value, dict) and "type" not in value and value:
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}", sub, out, depth)
    elif value is None or isinstance(value, dict):
        out.append((prefix, value))
    else:  # a dump wraps every argument in an item object: a bare number or string here is a broken dump
        raise EntryError(prefix, f'entry argument "{prefix}" is a bare {type(value).__name__}, where an item '
                                 f'(an object with "type") or null is expected')


_CONTAINERS = (("input_args", (list, tuple)), ("input", (list, tuple)), ("input_kwargs", dict), ("parameters", dict),
               ("output", (list, tuple, dict)))


def flatten_entry(name: str, entry: Optional[dict]) -> Tuple[List[Pair], List[Pair]]:
    """(inputs, outputs): lists of (param_key, item); item may be None (a null argument)."""
    inputs: List[Pair] = []
    outputs: List[Pair] = []
    if not entry:
        return inputs, outputs
    if ".parameters_grad" in name:
        for pname, items in entry.items():
            if isinstance(items, list) and len(items) == 1:
                _flatten(f"{name}.{pname}", items[0], inputs)
            else:
                _flatten(f"{name}.{pname}", items, inputs)
        return inputs, outputs
    # the common leaf (an item dict with "type", or null) is appended here; only nesting goes through _flatten
    for key, want in _CONTAINERS:
        value = entry.get(key)
        if value is not None and not isinstance(value, want):
            # (read as "no arguments", the node compared as a pass against a bench that has them)
            raise EntryError(name, f'entry "{name}": "{key}" is of type {type(value).__name__}, where '
                                   f'{"an object" if want is dict else "a list"} of items is expected')
    base_in = f"{name}.input."
    for key in ("input_args", "input"):
        value = entry.get(key)
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is None or (type(item) is dict and "type" in item):
                    inputs.append((base_in + str(i), item))
                else:
                    _flatten(base_in + str(i), item, inputs)
    kwargs = entry.get("input_kwargs")
    if isinstance(kwargs, dict):
        for key, item in kwargs.items():
            _flatten(base_in + key, item, inputs)
    params = entry.get("parameters")
    if isinstance(params, dict):
        for key, item in params.items():
            _flatten(f"{name}.parameters.{key}", item, inputs)
    value = entry.get("output")
    if isinstance(value, list):
        base_out = f"{name}.output."
        for i, item in enumerate(value):
            if item is None or (type(item) is dict and "type" in item):
                outputs.append((base_out + str(i), item))
            else:
                _flatten(base_out + str(i), item, outputs)
    elif isinstance(value, dict):
        _flatten(f"{name}.output.0", value, outputs)
    return inputs, outputs


def scalar_md5(value: Any) -> str:
    """The reference's checksum of a non-tensor argument: CRC-32 of its text form."""
    return "%08x" % (zlib.crc32(to_str(value).encode("utf-8")) & 0xFFFFFFFF)


_SCALAR_SKIP = ("type", "value")


def item_strings(item: Optional[dict], with_md5: bool = False) -> Dict[str, str]:
    """One dump item as the reference's string dict (without compare fields)."""
    if item is None:
        return {"value": "null"}
    if "value" in item or ("dtype" not in item and "type" in item and "group_ranks" not in item):
        value = item.get("value")
        text = to_str(value)
        out = {"type": to_str(item.get("type")), "value": text, "data_name": "-1", "requires_grad": "null",
               "Max": text, "Min": text, "Mean": text, "Norm": text,
               "dtype": f"<class {type(value).__name__}>", "shape": "[]"}
        for key, sub in item.items():
            if key not in _SCALAR_SKIP and key not in out:
                out[key] = to_str(sub)
        if with_md5 and "md5" not in out:
            out["md5"] = scalar_md5(value)
        return out
    out = {}
    for key, sub in item.items():
        t = type(sub)
        if t is float:
            out[key] = float.__repr__(sub)
        elif t is str:
            out[key] = sub
        else:
            out[key] = to_str(sub)
    if "data_name" not in out:
        out["data_name"] = "-1"
    return out


# ---------------------------------------------------------------------------------------------- JSON text
# tb_nodes.input_data / output_data are written as JSON text built directly (no dict-of-dicts, no json.dumps):
# the same bytes json.dumps would produce (", " / ": " separators, ASCII escapes).
_enc = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
_KEYS: Dict[str, str] = {}


def _key(k: str) -> str:
    text = _KEYS.get(k)
    if text is None:
        text = _KEYS[k] = _enc(k) + ": "
    return text


def _jval(value: Any) -> str:
    t = type(value)
    if t is float:
        return '"' + float.__repr__(value) + '"'
    if t is str:
        return _enc(value)
    return _enc(to_str(value))


_STD_KEYS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad")
_STD_TEMPLATE = ('"type": %s, "dtype": %s, "shape": %s, "Max": "%s", "Min": "%s", "Mean": "%s", "Norm": "%s", '
                 '"requires_grad": "%s", "data_name": "-1"')


_SCALAR_TEMPLATE = ('"type": %s, "value": "%s", "data_name": "-1", "requires_grad": "null", "Max": "%s", '
                    '"Min": "%s", "Mean": "%s", "Norm": "%s", "dtype": "<class %s>", "shape": "[]"')


def is_std_item(item: dict) -> bool:
    """The common statistics tensor item: exactly the eight keys, in the reference's order, string type/dtype."""
    return len(item) == 8 and tuple(item) == _STD_KEYS and type(item["type"]) is str and \
        type(item["dtype"]) is str


# %r of a float is float.__repr__, done inside the formatting operation (no Python-level call per number)
_STD_FLOATS = ('"type": %s, "dtype": %s, "shape": %s, "Max": "%r", "Min": "%r", "Mean": "%r", "Norm": "%r", '
               '"requires_grad": "%s", "data_name": "-1"')


def std_text(item: dict) -> str:
    """item_text of an item for which is_std_item holds: one formatting operation."""
    mx, mn, mean, norm = item["Max"], item["Min"], item["Mean"], item["Norm"]
    shape = item["shape"]
    if type(mx) is float and type(mn) is float and type(mean) is float and type(norm) is float and \
            type(shape) is list:
        return _STD_FLOATS % (_enc(item["type"]), _enc(item["dtype"]), '"' + str(shape) + '"', mx, mn, mean, norm,
                              "True" if item["requires_grad"] is True else to_str(item["requires_grad"]))
    return _STD_TEMPLATE % (
        _enc(item["type"]), _enc(item["dtype"]),
        # a list of ints prints with digits, commas and brackets only: nothing to escape
        '"' + str(shape) + '"' if type(shape) is list else _jval(shape),
        float.__repr__(mx) if type(mx) is float else to_str(mx),
        float.__repr__(mn) if type(mn) is float else to_str(mn),
        float.__repr__(mean) if type(mean) is float else to_str(mean),
        float.__repr__(norm) if type(norm) is float else to_str(norm),
        "True" if item["requires_grad"] is True else to_str(item["requires_grad"]))


def item_text(item: Optional[dict], with_md5: bool = False) -> str:
    """The fields of `item_strings(item)` as JSON object members (without the braces)."""
    if item is None:
        return '"value": "null"'
    if "value" in item or ("dtype" not in item and "type" in item and "group_ranks" not in item):
        if len(item) == 2 and type(item.get("type")) is str:
            value = item.get("value")
            t = type(value)
            if t is int or t is float or t is bool:
                text = to_str(value)
                out = _SCALAR_TEMPLATE % (_enc(item["type"]), text, text, text, text, text, t.__name__)
                return out + ', "md5": "' + scalar_md5(value) + '"' if with_md5 else out
        return fields_text(item_strings(item, with_md5))
    if is_std_item(item):
        return std_text(item)
    parts = [_key(k) + _jval(v) for k, v in item.items()]
    if "data_name" not in item:
        parts.append('"data_name": "-1"')
    return ", ".join(parts)


def fields_text(fields: Dict[str, str]) -> str:
    return ", ".join(_key(k) + _enc(v) for k, v in fields.items())


def data_text(members: List[Tuple[str, str]]) -> str:
    """{param_key: {fields}} from (param_key, member text) pairs."""
    if not members:
        return "{}"
    return "{" + ", ".join(_enc(k) + ": {" + m + "}" for k, m in members) + "}"
