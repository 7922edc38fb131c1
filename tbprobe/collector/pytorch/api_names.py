"""Which torch calls are recorded at L1/mix, under which name, and at which risk level.

The table maps the function object that TorchFunctionMode receives to (prefix, api name). Precedence follows the
namespace a model normally calls through: torch.nn.functional first (F.conv2d is torch.conv2d, and modules call
it through F), then Tensor methods, then torch.*, then torch._VF. Names were checked against the reference's own
dumps of the same models (tests/collector/golden/).
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["lookup", "DUNDER_ALIASES", "risk_of", "NEVER", "LOW_RISK", "CORE"]

# Never recorded: metadata queries, autograd plumbing, moves, formatting (REFERENCE.md "Never recorded").
NEVER = {
    "size", "dim", "numel", "item", "data_ptr", "stride", "storage_offset", "element_size", "nelement", "ndimension",
    "detach", "detach_", "contiguous", "requires_grad_", "cpu", "cuda", "npu", "backward", "register_hook",
    "register_post_accumulate_grad_hook", "retain_grad", "tolist", "numpy", "dim_order", "storage", "untyped_storage",
    "get_device", "has_names", "is_contiguous", "is_floating_point", "is_complex", "is_signed", "is_leaf",
    "view", "view_as", "__get__", "__set__", "__repr__", "__format__", "__len__", "__iter__", "__bool__", "__hash__",
    "__index__", "__int__", "__float__", "__complex__", "__array__", "__array_wrap__", "__contains__",
    "__reduce_ex__", "__deepcopy__", "__setstate__", "__getstate__", "__dir__", "__torch_function__", "__reversed__",
    "as_subclass", "pin_memory", "share_memory_", "record_stream", "data", "type", "grad", "_version",
    "is_tensor", "is_storage", "is_grad_enabled", "is_inference_mode_enabled", "get_default_dtype", "manual_seed",
    "set_grad_enabled", "no_grad", "enable_grad", "result_type", "can_cast", "promote_types",
    "is_nonzero", "is_same_size", "is_set_to", "is_shared", "is_pinned", "is_inference", "is_coalesced",
    "is_conj", "is_neg", "nbytes", "itemsize", "names", "refine_names", "rename", "align_to",
}
# FOCUS skips these (the reference keeps them as nodes of construct.json without statistics).
LOW_RISK = {
    # shape and layout
    "reshape", "reshape_as", "squeeze", "squeeze_", "unsqueeze", "unsqueeze_", "transpose", "transpose_", "permute",
    "expand", "expand_as", "split", "split_with_sizes", "tensor_split", "chunk", "cat", "concat", "concatenate",
    "stack", "hstack", "vstack", "dstack", "flatten", "unflatten", "narrow", "select", "t", "t_", "movedim",
    "moveaxis", "swapaxes", "swapdims", "repeat", "tile", "unbind", "flip", "roll", "as_strided", "unfold",
    "view_as_real", "view_as_complex", "__getitem__", "index_select", "masked_select", "ravel", "broadcast_to",
    "atleast_1d", "atleast_2d", "atleast_3d",
    # dtype conversions
    "to", "float", "half", "bfloat16", "double", "int", "long", "short", "bool", "byte", "char", "type_as",
    # constructors
    "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange", "range",
    "eye", "linspace", "logspace", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
    "tensor", "as_tensor", "from_numpy", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor",
    "empty_strided", "new_empty_strided", "scalar_tensor", "zero_", "fill_",
    # triangular and diagonal helpers
    "tril", "triu", "tril_", "triu_", "diag", "diagonal", "diag_embed", "diagflat", "tril_indices", "triu_indices",
    # clamp and clone
    "clamp", "clamp_", "clamp_min", "clamp_max", "clamp_min_", "clamp_max_", "clip", "clip_", "clone",
}
# CORE keeps only these kinds (and every collective).
CORE = {
    "matmul", "mm", "bmm", "addmm", "addmm_", "baddbmm", "addbmm", "addmv", "mv", "linear", "bilinear", "einsum",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
    "layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "local_response_norm", "normalize",
    "embedding", "embedding_bag", "scaled_dot_product_attention", "multi_head_attention_forward", "__matmul__",
    "__rmatmul__",
}

# Operators whose C implementation reports the plain method name: the patched dunder says which one it was.
DUNDER_ALIASES = {
    "__add__": "add", "__radd__": "add", "__iadd__": "add_", "__sub__": "sub", "__isub__": "sub_",
    "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul_", "__truediv__": "div", "__rtruediv__": "__rdiv__",
    "__itruediv__": "div_", "__ifloordiv__": "floor_divide_", "__mod__": "remainder", "__pow__": "pow",
    "__ipow__": "pow_", "__matmul__": "matmul", "__neg__": "neg", "__pos__": "positive", "__abs__": "abs",
    "__rand__": "bitwise_and", "__ror__": "bitwise_or", "__rxor__": "bitwise_xor", "__ne__": "ne", "__lt__": "lt",
    "__le__": "le", "__gt__": "gt", "__ge__": "ge",
}

_TABLE: Dict[object, Tuple[str, str]] = {}


def _add(obj: object, prefix: str, name: str) -> None:
    try:
        if obj not in _TABLE:
            _TABLE[obj] = (prefix, name)
    except TypeError:  # unhashable
        pass


def _build() -> None:
    for name in dir(F):
        if name.startswith("_"):
            continue
        obj = getattr(F, name)
        if callable(obj) and not isinstance(obj, type) and name not in NEVER:
            _add(obj, "Functional", name)
    for name in dir(torch.Tensor):
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            continue
        if name in NEVER:
            continue
        obj = getattr(torch.Tensor, name, None)
        if callable(obj) and not isinstance(obj, type):
            _add(obj, "Tensor", name)
    for name in dir(torch):
        if name.startswith("_") or name in NEVER:
            continue
        obj = getattr(torch, name)
        if callable(obj) and not isinstance(obj, type) and type(obj).__name__ in ("builtin_function_or_method",
                                                                                  "function"):
            _add(obj, "Torch", name)
    for name in ("_foreach_add_", "_foreach_mul_", "_foreach_addcmul_", "_foreach_addcdiv_", "_foreach_lerp_",
                 "_foreach_sqrt", "_foreach_div_", "_foreach_add", "_foreach_mul", "_foreach_norm"):
        obj = getattr(torch, name, None)
        if obj is not None:
            _add(obj, "Torch", name)
    vf = getattr(torch, "_VF", None)
    if vf is not None:
        for name in ("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "stft", "istft", "norm"):
            obj = getattr(vf, name, None)
            if obj is not None:
                _add(obj, "VF", name)


_build()


def lookup(func: object) -> Optional[Tuple[str, str]]:
    try:
        return _TABLE.get(func)
    except TypeError:
        return None


def risk_of(api: str) -> str:
    """'low' (FOCUS skips), 'core' (CORE keeps) or 'normal'."""
    if api in CORE:
        return "core"
    if api in LOW_RISK:
        return "low"
    return "normal"
