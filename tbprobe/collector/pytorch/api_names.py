"""Which torch calls are recorded at L1/mix, under which name, and at which risk level.

The table maps the function object that TorchFunctionMode receives to (prefix, api name). Precedence follows the
namespace a model normally calls through: torch.nn.functional first (F.conv2d is torch.conv2d, and modules call
it through F), then Tensor methods, then torch.*, then torch._VF. Names were checked against the reference's own
dumps of the same models (tests/collector/golden/).
"""
import os
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["lookup", "alias", "caller_named", "BY_CALLER", "passes_through", "DUNDER_ALIASES", "UNRECORDED_OPERATORS",
           "risk_of", "NEVER", "LOW_RISK", "CORE", "EXTRAS"]

# Never recorded: metadata queries, autograd plumbing, moves, formatting (REFERENCE.md "Never recorded").
NEVER = {
    "size", "dim", "numel", "item", "data_ptr", "storage_offset", "element_size", "nelement", "ndimension",
    "detach", "detach_", "contiguous", "requires_grad_", "cpu", "cuda", "npu", "backward", "register_hook",
    "register_post_accumulate_grad_hook", "retain_grad", "tolist", "dim_order", "storage", "untyped_storage",
    "get_device", "has_names", "is_contiguous", "is_floating_point", "is_complex", "is_signed", "is_leaf",
    "view", "__get__", "__set__", "__repr__", "__format__", "__len__", "__iter__", "__hash__",
    "__index__", "__int__", "__float__", "__complex__", "__array__", "__array_wrap__",
    "__reduce_ex__", "__deepcopy__", "__setstate__", "__getstate__", "__dir__", "__torch_function__",
    "as_subclass", "pin_memory", "share_memory_", "record_stream", "data", "type", "grad", "_version",
    "is_tensor", "is_storage", "is_grad_enabled", "is_inference_mode_enabled", "get_default_dtype", "manual_seed",
    "set_grad_enabled", "no_grad", "enable_grad", "result_type", "can_cast", "promote_types",
    "is_nonzero", "is_same_size", "is_set_to", "is_shared", "is_pinned", "is_inference", "is_coalesced",
    "is_conj", "is_neg", "nbytes", "itemsize", "names", "refine_names", "rename", "align_to",
}
# FOCUS skips these (the reference keeps them as nodes of construct.json without statistics). Checked call by call
# against the reference's dumps: it keeps the in-place forms of most of them (transpose_, clamp_, tril_ ...) and
# t, narrow, select, flip, roll, index_select, masked_select, broadcast_to, diagonal, short, fill_ and
# scalar_tensor, so those are not here.
LOW_RISK = {
    # shape and layout
    "reshape", "reshape_as", "squeeze", "unsqueeze", "transpose", "permute", "expand", "expand_as", "split",
    "split_with_sizes", "tensor_split", "chunk", "cat", "concat", "concatenate", "stack", "hstack", "vstack",
    "dstack", "column_stack", "row_stack", "hsplit", "vsplit", "dsplit", "unsafe_chunk", "unsafe_split",
    "unsafe_split_with_sizes", "flatten", "unflatten", "movedim", "moveaxis", "swapaxes", "swapdims", "repeat",
    "repeat_interleave", "tile", "unbind",
    "as_strided", "unfold", "view_as_real", "view_as_complex", "__getitem__", "ravel", "atleast_1d", "atleast_2d",
    "atleast_3d", "view_as", "stride",
    # dtype conversions and leaving torch
    "to", "float", "half", "bfloat16", "double", "int", "long", "bool", "byte", "char", "cfloat", "type_as", "numpy",
    "__bool__",
    # constructors
    "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange", "range",
    "eye", "linspace", "logspace", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
    "tensor", "as_tensor", "from_numpy", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor",
    "empty_strided", "new_empty_strided", "zero_",
    # triangular and diagonal helpers
    "tril", "triu", "diag", "diag_embed", "diagflat", "tril_indices", "triu_indices",
    # clamp and clone
    "clamp", "clone",
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
    "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul_", "__truediv__": "div", "__ifloordiv__": "floor_divide_",
    "__mod__": "remainder", "__imod__": "remainder_", "__pow__": "pow", "__ipow__": "pow_", "__matmul__": "matmul",
    "__ror__": "bitwise_or", "__rxor__": "bitwise_xor", "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt",
    "__ge__": "ge",
}
# Operator forms the reference does not record, where the method form is recorded: `-x`, `+x`, `abs(x)`, `x /= y`
# and `3 & x` reach the mode as x.neg(), x.positive() ... would. The reference patches methods, and Python's
# operators go through slots it leaves alone. Patched like DUNDER_ALIASES, only to tell the two forms apart.
UNRECORDED_OPERATORS = {
    "__neg__": "neg", "__pos__": "positive", "__abs__": "abs", "__itruediv__": "div_", "__rand__": "bitwise_and",
}
# Tensor methods written in Python (torch/_tensor.py) that the reference does not patch: it records the calls
# inside them, so the mode runs their body. Reflected operators (`2 / x` is x.reciprocal() * 2, `2 // x` is
# torch.floor_divide(2, x)) and Python's protocol: `0 in x` is `(0 == x).any()`, reversed(x) is x.flip(0), called
# by transformers' padding check on every forward of its encoder models.
PASS_THROUGH = ("__rdiv__", "__rfloordiv__", "__rmatmul__", "__contains__", "__reversed__")

# Callables torch exposes that the reference never records (checked against its dumps and the functions it patches,
# tests/collector/test_api_coverage.py): Python's object protocol and operator forms it leaves alone, copies,
# random fills and constructors, sparse, quantized and complex plumbing, backend-specific kernels, global settings
# and a few rarely used operators. Recording them would give nodes the reference's dump of the same model lacks.
# By namespace: the reference records torch.clone and torch.batch_norm, not Tensor.clone and not torch.batch_norm's
# twin, and so on.
_NOT_RECORDED_TENSOR = {
    # object protocol, and operators whose slot the reference leaves alone
    "__init__", "__new__", "__getattribute__", "__setattr__", "__delattr__", "__delitem__", "__reduce__",
    "__sizeof__", "__str__", "__dlpack__", "__dlpack_device__", "__torch_dispatch__", "__init_subclass__",
    "__subclasshook__", "__getitem__", "__long__", "__invert__", "__rand__", "__rlshift__", "__rrshift__",
    "__pos__", "positive",
    # copies, fills, constructors, conversions
    "copy_", "clone", "new", "new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros",
    "zero_", "random_", "uniform_", "apply_", "set_", "resize", "resize_as", "cdouble", "chalf",
    # views
    "as_strided", "as_strided_", "as_strided_scatter", "select_scatter", "slice_inverse", "swapaxes_",
    # sparse, quantized and complex plumbing, other devices
    "coalesce", "indices", "values", "dense_dim", "sparse_dim", "sparse_mask", "to_dense", "to_mkldnn",
    "to_padded_tensor", "dequantize", "int_repr", "qscheme", "conj", "conj_physical_", "resolve_conj",
    "storage_type", "const_data_ptr", "module_load", "reinforce", "hash_tensor", "ipu", "xpu", "mtia",
    "is_distributed", "q_scale", "q_per_channel_axis", "q_per_channel_scales", "q_per_channel_zero_points",
    # rarely used operators
    "cross", "trace", "index", "index_reduce", "index_reduce_", "scatter_reduce", "scatter_reduce_", "put",
    "nonzero_static", "subtract_", "istft",
}
_NOT_RECORDED_TORCH = {
    # constructors, random and conversions
    "empty", "empty_like", "empty_permuted", "empty_strided", "ones", "ones_like", "zeros", "zeros_like", "rand",
    "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "tensor", "as_tensor", "asarray",
    "from_numpy", "from_dlpack", "to_dlpack", "from_file", "frombuffer", "complex", "fill",
    # views and the plumbing of other layouts
    "as_strided", "as_strided_", "as_strided_scatter", "select_scatter", "slice_scatter", "slice_inverse",
    "view_as_real", "view_as_complex", "adjoint", "conj", "conj_physical", "conj_physical_", "resolve_conj", "imag",
    "dequantize", "int_repr", "is_distributed", "hash_tensor", "positive", "zero_", "resize_as_sparse_",
    # rarely used operators, and ones whose functional twin the reference records
    "trace", "index_reduce", "scatter_reduce", "put", "nonzero_static", "allclose", "corrcoef", "gradient", "isreal",
    "lobpcg", "lu", "meshgrid", "orgqr", "ormqr", "pca_lowrank", "svd_lowrank", "segment_reduce", "trapezoid",
    "unique", "unravel_index", "native_dropout", "bitwise_left_shift", "bitwise_right_shift", "rnn_relu",
    "rnn_relu_cell", "rnn_tanh", "rnn_tanh_cell", "batch_norm", "native_channel_shuffle",
    # utilities that take or give no tensor data
    "broadcast_shapes", "classproperty", "compile", "cond", "fork", "wait", "vmap", "while_loop", "load", "save",
    "typename", "seed", "initial_seed", "init_num_threads", "unify_type_list", "merge_type_from_type_comment",
    "compiled_with_cxx11_abi", "prepare_multiprocessing_environment", "thread_safe_generator", "get_file_path",
    "clear_autocast_cache", "use_deterministic_algorithms", "parse_ir", "parse_schema", "parse_type_comment",
    "import_ir_module", "import_ir_module_from_buffer", "profiler_allow_cudagraph_cupti_lazy_reinit_cuda12",
}
# Kinds of torch.* functions, by name: sparse layouts, quantization, backend kernels, settings and queries, copies.
_NOT_RECORDED_PREFIXES = ("to_sparse", "sparse_", "q_", "quantize", "quantized_", "fake_quantize", "fused_moving_avg",
                          "fbgemm_", "cudnn_", "miopen_", "mkldnn_", "sym_", "autocast_", "set_", "get_", "is_",
                          "are_", "empty_quantized")
_NOT_RECORDED_SUFFIXES = ("_copy",)
_INDEX_ACCESSORS = ("crow_indices", "col_indices", "ccol_indices", "row_indices")
_RECORDED_ANYWAY_TORCH = {"index_copy", "narrow_copy", "sparse_coo_tensor"}   # (caught by the rules above)
_NOT_RECORDED_FUNCTIONAL = {"assert_int_or_pair", "native_channel_shuffle"}
# Kept beyond the reference: operators it does not know (newer ones, and the torch.linalg functions missing from its
# list), whose work would otherwise go unrecorded. Each is one C++ call, so no call the reference records is
# hidden inside them.
EXTRAS = {"rms_norm", "grouped_mm", "scaled_mm", "scaled_grouped_mm", "linear_cross_entropy", "eigh", "eigvals",
          "eigvalsh", "ldl_solve", "solve_triangular", "tensorinv"}
# Underscored torch functions the reference records.
_PRIVATE_RECORDED = ("_foreach_norm", "_fused_adamw_", "_adaptive_avg_pool2d", "_add_relu", "_add_relu_", "_aminmax",
                     "_batch_norm_impl_index", "_convolution", "_softmax_backward_data")
# One function object under several names: the name the reference gives a call of it (torch.mm is torch.dsmm).
_PREFERRED = {"mm", "hspmm", "sspaddmm", "abs", "neg", "threshold", "__idiv__"}

# torch.nn's recurrent modules call their kernels through torch._VF, which the reference does not wrap (its dumps have
# no node for an LSTM's work), while a direct torch.lstm(...) it records as Torch.lstm. Both are one function
# object, so the caller tells them apart: the modules' calls are VF.<name> (recorded beyond the reference: at L1 the
# recurrent work would otherwise go unrecorded), a direct call keeps the reference's name.
_RNN_KERNELS = ("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell")
_RNN_MODULES_FILE = os.path.join("torch", "nn", "modules", "rnn.py")
BY_CALLER: Dict[object, Tuple[str, str]] = {}

_TABLE: Dict[object, Tuple[str, str]] = {}
_PASS: set = set()


def _recorded(namespace: str, name: str) -> bool:
    if name in NEVER:
        return False
    if name in EXTRAS:
        return True
    if namespace == "Tensor":
        return not (name in _NOT_RECORDED_TENSOR or name.startswith(("to_sparse", "sparse_", "resize_as_sparse"))
                    or name in _INDEX_ACCESSORS)
    if namespace == "Torch":
        return name in _RECORDED_ANYWAY_TORCH or not (
            name in _NOT_RECORDED_TORCH or name.startswith(_NOT_RECORDED_PREFIXES) or name.endswith(_NOT_RECORDED_SUFFIXES))
    return name not in _NOT_RECORDED_FUNCTIONAL


def _add(obj: object, prefix: str, name: str) -> None:
    try:
        old = _TABLE.get(obj)
        if old is None or (old[0] == prefix and name in _PREFERRED and old[1] not in _PREFERRED):
            _TABLE[obj] = (prefix, name)
    except TypeError:  # unhashable
        pass


def _functions(namespace: object, private: bool = False):
    """(name, function) for the public callables of a namespace that are not classes."""
    for name in dir(namespace):
        if name.startswith("_") and not private:
            continue
        obj = getattr(namespace, name, None)
        if callable(obj) and not isinstance(obj, type):
            yield name, obj


def _build() -> None:
    for name, obj in _functions(F):
        # (F's namespace also holds what it imports: typing.Optional, torch.overrides' helpers)
        if _recorded("Functional", name) and getattr(obj, "__module__", "torch.nn.functional") in (
                "torch.nn.functional", "torch._C._nn", None, "torch", "torch.functional", "torch._C._VariableFunctions"):
            _add(obj, "Functional", name)
    for name in dir(torch.Tensor):
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            continue
        obj = getattr(torch.Tensor, name, None)
        if callable(obj) and not isinstance(obj, type) and _recorded("Tensor", name):
            _add(obj, "Tensor", name)
    for name, obj in _functions(torch):
        if type(obj).__name__ in ("builtin_function_or_method", "function") and _recorded("Torch", name):
            _add(obj, "Torch", name)
    for name, obj in _functions(torch.linalg):   # the reference names torch.linalg.norm "Torch.norm"
        _add(obj, "Torch", name)
    for name in _PRIVATE_RECORDED:
        obj = getattr(torch, name, None)
        if obj is not None:
            _add(obj, "Torch", name)
    vf = getattr(torch, "_VF", None)
    if vf is not None:
        for name in _RNN_KERNELS + ("stft", "istft", "norm"):
            obj = getattr(vf, name, None)
            if obj is not None:
                _add(obj, "VF", name)
                if name in _RNN_KERNELS:
                    BY_CALLER[obj] = ("VF", name)
    for name in PASS_THROUGH:
        obj = getattr(torch.Tensor, name, None)
        if obj is not None:
            _TABLE.pop(obj, None)
            _PASS.add(obj)


_build()


def alias(new: object, old: object) -> None:
    """Record calls of `new` (a replacement of a torch function, seed_all's dropout with p=0) as `old`'s."""
    info = lookup(old)
    if info is not None:
        _TABLE[new] = info


def lookup(func: object) -> Optional[Tuple[str, str]]:
    try:
        return _TABLE.get(func)
    except TypeError:
        return None


def caller_named(named: Tuple[str, str], info: Tuple[str, str], caller) -> Tuple[str, str]:
    """The name of a call of a function of BY_CALLER (`named` there, `info` in the table) made from the frame
    `caller`: the recurrent kernels that torch.nn's modules call are named apart from direct calls of them."""
    if caller is not None and caller.f_code.co_filename.endswith(_RNN_MODULES_FILE):
        return named
    return info


def passes_through(func: object) -> bool:
    """Whether the mode runs `func`'s own body, so that the calls inside it are recorded instead of it."""
    try:
        return func in _PASS
    except TypeError:
        return False


def risk_of(api: str) -> str:
    """'low' (FOCUS skips), 'core' (CORE keeps) or 'normal'."""
    if api in CORE:
        return "core"
    if api in LOW_RISK:
        return "low"
    return "normal"
