"""Python/torch values -> dump.json items (REFERENCE.md s1), with statistics taken through the session's buffer."""
import dataclasses
import zlib
from typing import Any, Callable, Optional, Sequence

import torch

from tbprobe.collector.pytorch import odd_tensors
from tbprobe.collector.pytorch.stats import is_summarisable, tensor_checksum, tensor_xor

__all__ = ["ItemMaker", "field_names"]

_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_EMPTY_CHECKSUM = "%08x" % zlib.crc32(b"")   # ("00000000")
_DTYPE_NAMES: dict = {}
_STRIDED = torch.strided
_REDUCIBLE = odd_tensors.REDUCIBLE


def _is_dtensor(t: torch.Tensor) -> bool:
    return type(t) not in _PLAIN and type(t).__name__ == "DTensor"


# the tensor subclasses whose items the reference writes under their own type (others are "torch.Tensor"), by the
# module and class name it writes; a subclass of one of them counts as it
_REFERENCE_TYPES = (("torch.distributed._functional_collectives", "AsyncCollectiveTensor"),
                    ("torch.nested._internal.nested_tensor", "NestedTensor"),
                    ("torch._subclasses.fake_tensor", "FakeTensor"))
_TYPE_NAMES: dict = {}   # tensor type -> the item's "type"


def _type_name(cls: type) -> str:
    name = _TYPE_NAMES.get(cls)
    if name is None:
        name = "torch.Tensor"
        for module, cname in _REFERENCE_TYPES:
            if any(k.__name__ == cname and k.__module__ == module for k in cls.__mro__):
                name = f"{module}.{cname}"
                break
        _TYPE_NAMES[cls] = name
    return name


_PLACEMENT_FIELDS = ("dim", "split_factor", "reduce_op")   # (torch's placements are C++ objects: no fields list)


def _placement(p: Any) -> dict:
    """A DTensor placement as the reference writes it: {"Shard": {"dim": 0}}, {"Replicate": {}}."""
    return {type(p).__name__: {f: _plain(getattr(p, f)) for f in _PLACEMENT_FIELDS if hasattr(p, f)}}


_PLAIN_DISPATCH = torch.Tensor.__torch_dispatch__
_OWN_DISPATCH: dict = {}   # tensor type -> whether it has a __torch_dispatch__ of its own


def _own_dispatch(cls: type) -> bool:
    """A wrapper subclass (torchao's, NF4, float8 training's...): torch's reductions on it give tensors of its
    own type, often without storage, which the statistics' batch cannot stack or read back."""
    own = _OWN_DISPATCH.get(cls)
    if own is None:
        own = _OWN_DISPATCH[cls] = getattr(cls, "__torch_dispatch__", _PLAIN_DISPATCH) is not _PLAIN_DISPATCH
    return own


def _plain_copy(t: torch.Tensor) -> Optional[torch.Tensor]:
    """A plain tensor of a wrapper subclass's values (copy_ into it runs through the subclass's dispatch), or None
    where the subclass refuses."""
    try:
        with torch.no_grad():
            plain = torch.empty(t.shape, dtype=t.dtype, device=t.device)
            plain.copy_(t)
        return plain
    except Exception:
        return None


def _dtype_name(dt: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = str(dt)
    return name


def _xor_of_value(v):
    """A 0-dim tensor's xor "checksum", as the reference writes it: a float's value itself, an integer's (or a
    bool's) as a 64-bit two's complement word, like any other checksum."""
    if isinstance(v, (bool, int)):
        return "0x%016x" % (int(v) & 0xFFFFFFFFFFFFFFFF)
    return v


class ItemMaker:
    """Builds items; `on_tensor(item, tensor, key)` lets the session attach stats/checksums/files."""

    def __init__(self, task: str, summary_mode: str, on_stats: Callable, on_save: Optional[Callable],
                 tensor_list: Sequence[str] = (), fill: Optional[Callable[[dict, torch.Tensor], bool]] = None,
                 host_item: Optional[Callable[[Any], Optional[dict]]] = None,
                 fill_row: Optional[Callable[[dict, list], None]] = None) -> None:
        self.tensor_list = tuple(tensor_list)   # substrings of names whose tensors are also saved
        self.structure = task == "structure"
        self.tensor_task = task == "tensor"
        self.summary_mode = summary_mode
        self.on_stats = on_stats        # (item, tensor) -> None: schedules Max/Min/Mean/Norm
        # (item, tensor) -> bool: fills them at once when it can (the host kernel); on_stats takes the rest
        self.fill = fill
        self.on_save = on_save          # (item, tensor, key) -> None: schedules a .pt file
        # (item, row) -> None: fills an item whose statistics were computed at once (odd_tensors)
        self.fill_row = fill_row or _fill_row
        self.nonfinite_scalars = 0      # NaN/Inf float arguments seen (the writer's choice of encoder)
        # statistics only: no checksum, no saved tensor (tensor_item's short path)
        self.fast = (task == "statistics" and summary_mode == "statistics" and not self.tensor_list)
        # (value) -> the whole item of a small plain CPU tensor, or None (StatBuffer.host_item, in C): used when
        # an item is statistics (and md5) only, with nothing saved
        self.host_item = (host_item if task == "statistics" and summary_mode in ("statistics", "md5")
                          and not self.tensor_list else None)

    def _saves(self, key: str, save: bool) -> bool:
        return self.on_save is not None and (self.tensor_task or save or
                                             (bool(self.tensor_list) and any(p in key for p in self.tensor_list)))

    def tensor_item(self, t: torch.Tensor, key: str, save: bool = False) -> dict:
        if (self.fast and type(t) in _PLAIN and not save and t.layout is _STRIDED and t.dtype in _REDUCIBLE
                and not t.is_nested and not t.is_meta and t.numel()):
            # the common case in one dict literal (statistics task, plain dense tensor with data, nothing saved)
            dt = t.dtype
            item = {"type": "torch.Tensor", "dtype": _DTYPE_NAMES.get(dt) or _dtype_name(dt), "shape": list(t.shape),
                    "Max": None, "Min": None, "Mean": None, "Norm": None, "requires_grad": t.requires_grad}
            fill = self.fill
            if fill is None or not fill(item, t):
                view = odd_tensors.functorch_view(t)   # (the C reader refuses them: no storage)
                if view is not None:
                    return self._functorch_item(t, view, key, save)
                if odd_tensors.legacy_batched(t):   # (refused by the C reader too; rare)
                    return self._batched_item(t)
                self.on_stats(item, t)
            return item
        if _is_dtensor(t):
            # the local shard summarised (and saved), under the DTensor's type, mesh and placements, as the
            # reference writes it
            item = self.tensor_item(t.to_local(), key, save)
            item["type"] = "torch.distributed.tensor.DTensor"
            item["requires_grad"] = t.requires_grad
            try:
                layout = {"device_mesh": t.device_mesh.mesh.tolist(),
                          "placements": [_placement(p) for p in t.placements]}
            except Exception:    # (a DTensor of another layout): its statistics stand without them
                return item
            # right after requires_grad, where the reference has them (tbprobe's counts, when there, after); in
            # place: the statistics of a tensor read at the step's end are filled into this very dict
            keys = list(item)
            after = keys[keys.index("requires_grad") + 1:] if "requires_grad" in item else []
            rest = [(k, item.pop(k)) for k in after]
            item.update(layout)
            item.update(rest)
            return item
        view = odd_tensors.functorch_view(t)
        if view is not None:
            return self._functorch_item(t, view, key, save)
        if odd_tensors.legacy_batched(t):
            return self._batched_item(t)
        requires_grad = t.requires_grad
        # (a jagged nested tensor is a subclass of this kind too, which odd_tensors reads)
        wrapped = type(t) not in _PLAIN and _own_dispatch(type(t)) and not t.is_nested
        if wrapped:
            original = t
            # summarised through a plain copy of its values, which its own dispatch makes; the copy is gone by the
            # step's end, so its statistics are computed at once
            t = _plain_copy(t)
            if t is None:
                return self._unreadable_item(requires_grad, original)
        # a tensor torch's reductions refuse (odd_tensors): its shape, statistics, checksum bytes and saved form
        # come from odd_tensors, the statistics computed at once
        odd = odd_tensors.is_odd(t)
        item = {"type": _type_name(type(original if wrapped else t)), "dtype": _dtype_name(t.dtype),
                "shape": odd_tensors.shape_of(t) if odd else list(t.shape)}
        data = is_summarisable(t)
        if self.summary_mode == "xor" and not self.structure:
            # the reference writes a 0-dim tensor's value itself in xor mode (as it does for its statistics)
            if not data:
                item["md5"] = None
            elif odd:
                item["md5"] = tensor_xor(odd_tensors.checksum_source(t))
            else:
                item["md5"] = _xor_of_value(t.item()) if t.dim() == 0 else tensor_xor(t)
            if _nonfinite(item["md5"]):
                self.nonfinite_scalars += 1
            item["requires_grad"] = requires_grad
            if data and self._saves(key, save):
                self.on_save(item, odd_tensors.savable(t) if odd else t, key)
            return item
        if not self.structure:
            item["Max"] = item["Min"] = item["Mean"] = item["Norm"] = None
        item["requires_grad"] = requires_grad
        if self.structure or not data:
            if self.summary_mode == "md5" and not self.structure:
                # the checksum of no bytes for an empty tensor (as the reference writes it); none for a tensor
                # whose values do not exist (meta, fake)
                item["md5"] = _EMPTY_CHECKSUM if t.numel() == 0 and not t.is_meta and type(t) in _PLAIN else None
            return item
        if odd or wrapped:
            row = odd_tensors.stats_row(t)
            if row is not None:
                self.fill_row(item, row)
        elif self.fill is None or not self.fill(item, t):
            self.on_stats(item, t)
        if self._saves(key, save):
            self.on_save(item, odd_tensors.savable(t) if odd else t, key)
        if self.summary_mode == "md5":   # (after the file's name, as the reference orders them)
            item["md5"] = tensor_checksum(odd_tensors.checksum_source(t) if odd else t)
        return item

    def _batched_item(self, t: torch.Tensor) -> dict:
        """A tensor of torch's older vmap (odd_tensors.legacy_batched): no values to read or save outside it."""
        item = self._unreadable_item(t.requires_grad, t)
        item["type"] = "BatchedTensor"
        return item

    def _unreadable_item(self, requires_grad: bool, like: torch.Tensor) -> dict:
        """The item of a tensor whose values cannot be read: its metadata, statistics null (as the reference
        writes a wrapper subclass's)."""
        item = {"type": _type_name(type(like)), "dtype": _dtype_name(like.dtype), "shape": list(like.shape)}
        if self.summary_mode == "xor" and not self.structure:
            item["md5"] = None
        elif not self.structure:
            item["Max"] = item["Min"] = item["Mean"] = item["Norm"] = None
        item["requires_grad"] = requires_grad
        if self.summary_mode == "md5" and not self.structure:
            item["md5"] = None
        return item

    def _fields(self, v: Any, names: Any, key: str, save: bool) -> dict:
        return {str(f): self.value(getattr(v, f, None), f"{key}.{f}", save) for f in names}

    def _functorch_item(self, t: torch.Tensor, view: tuple, key: str, save: bool) -> dict:
        """A functorch wrapper's item: the plain tensor under it summarised (and saved), under the wrapper's type,
        shape and requires_grad (`view`: odd_tensors.functorch_view(t))."""
        kind, shape, plain = view
        # with the transforms' dispatch off: under torch.func.grad any torch call (the detach, the statistics'
        # kernels off the C path) would wrap its result again, at the transform's level
        with torch._C._DisableFuncTorch():
            item = self.tensor_item(plain.detach(), key, save)
        item["type"], item["shape"], item["requires_grad"] = kind, shape, t.requires_grad
        return item

    def item_at(self, v: Any, prefix: str, slot: Any) -> Any:
        """value(v, f"{prefix}.{slot}"), the key made only when the C path cannot take `v` (the common tensor
        needs no key: nothing of it is saved)."""
        host_item = self.host_item
        if host_item is not None:
            item = host_item(v)
            if item is not None:
                return item
        return self._value(v, f"{prefix}.{slot}", False)

    def list_items(self, values: Sequence[Any], prefix: str) -> list:
        """[item_at(v, prefix, i) for i, v in enumerate(values)] without a call per value."""
        host_item = self.host_item
        out = []
        for i, v in enumerate(values):
            item = host_item(v) if host_item is not None else None
            out.append(item if item is not None else self._value(v, f"{prefix}.{i}", False))
        return out

    def value(self, v: Any, key: str, save: bool = False) -> Any:
        host_item = self.host_item
        if host_item is not None and not save:
            item = host_item(v)
            if item is not None:
                return item
        return self._value(v, key, save)

    def _value(self, v: Any, key: str, save: bool) -> Any:
        """value() past the C path."""
        if isinstance(v, torch.Tensor):
            return self.tensor_item(v, key, save)
        if v is None:
            return None
        kind = _SCALARS.get(type(v))
        if kind is not None:
            if kind == "float" and _nonfinite(v):   # the step's dump then needs the json module
                self.nonfinite_scalars += 1
            return {"type": kind, "value": v}
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            if isinstance(v, tuple) and hasattr(v, "_fields"):   # a namedtuple: by field, as the reference
                return self._fields(v, v._fields, key, save)
            return [self.value(x, f"{key}.{i}", save) for i, x in enumerate(v)]
        if isinstance(v, dict):
            if _is_dataclass(v):
                # transformers' ModelOutput, a dict of its fields that are not None: every field, None ones too,
                # as the reference writes a dataclass
                return self._fields(v, v.__dataclass_fields__, key, save)
            return {str(k): self.value(x, f"{key}.{k}", save) for k, x in v.items()}
        if _is_dataclass(v):
            return self._fields(v, v.__dataclass_fields__, key, save)
        if isinstance(v, torch.Size):
            return {"type": "torch.Size", "value": list(v)}
        if isinstance(v, slice):
            return {"type": "slice", "value": [_plain(v.start), _plain(v.stop), _plain(v.step)]}
        if isinstance(v, torch.dtype):
            return {"type": "torch.dtype", "value": str(v)}
        if isinstance(v, torch.device):
            return {"type": "torch.device", "value": str(v)}
        if v is Ellipsis:
            return {"type": "ellipsis", "value": "..."}
        if type(v).__name__ == "ProcessGroup":
            return _process_group(v)
        if isinstance(v, torch.memory_format):
            return {"type": "torch.memory_format", "format": _MEMORY_FORMATS.get(v)}
        if _REDUCE_OPS and isinstance(v, _REDUCE_OPS):
            return {"type": "torch.distributed.ReduceOp", "value": str(v)}
        if _P2POP is not None and isinstance(v, _P2POP):
            return self._p2pop(v, key, save)
        if isinstance(v, (int, float, bool)):  # numpy scalars and friends
            value = v.item() if hasattr(v, "item") else v
            if _nonfinite(value):
                self.nonfinite_scalars += 1
            return {"type": type(v).__name__, "value": value}
        return None

    def _p2pop(self, op: Any, key: str, save: bool) -> dict:
        """A batch_isend_irecv operation, as the reference writes one: its tensor, direction, peer and group."""
        item = {"class_type": "torch.distributed.P2POp",
                "tensor": self._value(op.tensor, key, save),
                "op": getattr(op.op, "__name__", str(op.op)), "peer": op.peer, "tag": op.tag}
        try:
            import torch.distributed as dist

            group = op.group if op.group is not None else dist.distributed_c10d._get_default_group()
            item["group_id"] = _process_group(group)["group_id"]
        except Exception:   # (no default group: the op would fail anyway)
            pass
        return item


_MEMORY_FORMATS = {torch.contiguous_format: "contiguous_format", torch.channels_last: "channels_last",
                   torch.channels_last_3d: "channels_last_3d", torch.preserve_format: "preserve_format"}
try:
    import torch.distributed as _dist

    _REDUCE_OPS: tuple = tuple(t for t in (getattr(_dist, "ReduceOp", None),
                                           getattr(getattr(_dist, "ReduceOp", None), "RedOpType", None))
                               if isinstance(t, type))
    _P2POP = getattr(_dist, "P2POp", None)
except ImportError:   # a torch built without distributed
    _REDUCE_OPS, _P2POP = (), None


def _is_dataclass(v: Any) -> bool:
    return dataclasses.is_dataclass(v) and not isinstance(v, type)


def field_names(v: Any) -> Optional[tuple]:
    """The fields of a namedtuple or of a dataclass instance (transformers' ModelOutput too), by which the
    reference writes such a value (as ItemMaker does); None for anything else."""
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return v._fields
    if _is_dataclass(v):
        return tuple(v.__dataclass_fields__)
    return None


def _fill_row(item: dict, row: list) -> None:
    """ItemMaker.fill_row without a statistics buffer: the row goes into the item, no health is counted."""
    item.update(zip(odd_tensors.ROW_KEYS, row))


def _nonfinite(v: Any) -> bool:
    """A float NaN or +-Inf (x - x is 0 only for a finite x): orjson would write it as null."""
    return isinstance(v, float) and v - v != 0


def _plain(v: Any) -> Any:
    return v if v is None or isinstance(v, (int, float, str, bool)) else str(v)


def _process_group(pg: Any) -> dict:
    try:
        import torch.distributed as dist

        ranks = dist.get_process_group_ranks(pg)
    except Exception:
        ranks = []
    # the same group gets the same id on every rank, so the graph builder can pair collectives across ranks: the
    # reference's id (the CRC-32 of the ranks' list as Python prints it)
    ranks = list(ranks)
    return {"type": "torch.ProcessGroup", "group_ranks": ranks,
            "group_id": "%08x" % (zlib.crc32(str(ranks).encode()) & 0xFFFFFFFF)}
