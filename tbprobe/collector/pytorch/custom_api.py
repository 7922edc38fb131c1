"""register_custom_api / restore_custom_api: a user's own function recorded as one operator (L0, L1, mix).

`debugger.register_custom_api(module, "fused_op", api_prefix=None)` replaces `module.fused_op` with a wrapper.
While a step is collected, each call is recorded as `<prefix>.fused_op.<n>.forward` and gets a backward record,
as an operator is. `<prefix>` is `api_prefix`, or the module's `__name__`. The torch calls inside the function are
not recorded. This is how the reference treats a fused or vendor kernel that torch's dispatch does not see.
At L0 it is recorded beside the modules, the one operator there, as the reference records it. Outside a
collected step, or at level debug, the wrapper only calls the function.
`restore_custom_api(module, "fused_op")` puts the function back; so does the debugger's close().
"""
import functools
from typing import Any, Callable, Dict, Optional, Tuple

from tbprobe.errors import TbprobeError

__all__ = ["CustomApis"]


class CustomApis:
    def __init__(self, get_capture: Callable[[], Any], session: Any) -> None:
        self._get_capture = get_capture      # -> the ApiCapture, or None at debug
        self.session = session
        self._wrapped: Dict[Tuple[int, str], Tuple[Any, Any, Any]] = {}   # (id(module), api) -> (module, orig, wrapper)

    def register(self, module: Any, api: str, api_prefix: Optional[str] = None) -> None:
        if not isinstance(api, str) or not hasattr(module, api):
            raise TbprobeError(f"register_custom_api: {getattr(module, '__name__', module)!s} has no attribute {api!r}")
        if api_prefix is None or api_prefix == "":
            api_prefix = getattr(module, "__name__", None) or "Custom"
        if not isinstance(api_prefix, str):
            raise TbprobeError(f"register_custom_api: api_prefix must be a str, not {type(api_prefix).__name__}")
        orig = getattr(module, api)
        if not callable(orig):
            raise TbprobeError(f"register_custom_api: {api_prefix}.{api} is not callable")
        key = (id(module), api)
        if key in self._wrapped:
            _, first, earlier = self._wrapped[key]
            if orig is earlier:          # registered again (another prefix, say): wrap the original once
                orig = first
        wrapper = self._wrapper(orig, api_prefix, api)
        setattr(module, api, wrapper)
        self._wrapped[key] = (module, orig, wrapper)

    def restore(self, module: Any, api: str) -> None:
        entry = self._wrapped.pop((id(module), api), None)
        if entry is not None and getattr(module, api, None) is entry[2]:
            setattr(module, api, entry[1])

    def restore_all(self) -> None:
        for (_, api), (module, _, _) in list(self._wrapped.items()):
            self.restore(module, api)

    def _wrapper(self, orig: Callable, prefix: str, api: str) -> Callable:
        s = self.session
        get_capture = self._get_capture

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            capture = get_capture()
            if (capture is None or s.busy or not s.active
                    or (s.scope_ids is not None and s.scope_depth == 0)):
                return orig(*args, **kwargs)
            return capture.call(orig, prefix, api, args, kwargs, custom=True)

        return wrapper
