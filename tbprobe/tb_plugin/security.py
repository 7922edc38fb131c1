"""Request checks shared by every route: paths stay inside the log directory, writes come from our own origin,
bodies are small JSON objects.

The reference plugin joins user-supplied names onto the log directory unchecked (path traversal) and accepts
cross-site POSTs; here every path goes through :func:`resolve_inside` and every write through :func:`read_json_post`.
"""
import json
import os
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from tbprobe.tb_plugin.api_error import ApiError, quoted

__all__ = ["MAX_BODY_BYTES", "resolve_inside", "check_origin", "read_json_post"]

MAX_BODY_BYTES = 1 << 20


def resolve_inside(logdir: str, *parts: str, folder: str = "the log directory") -> str:
    """The real path of ``logdir/parts...``; 403 unless it stays inside that folder (``folder`` names it in the
    refusal: the static route's root is the bundle's folder, not the log directory).

    Relative parts only: absolute paths, ``..`` components, NUL bytes and symbolic links that lead outside are
    refused. The check is on the resolved path, so a link inside the folder that points inside stays allowed.
    """
    root = os.path.realpath(logdir)
    for part in parts:
        if not isinstance(part, str) or "\x00" in part:
            raise ApiError(403, "path refused: not a plain relative name")
        if os.path.isabs(part) or part.startswith(("/", "\\")) or (len(part) > 1 and part[1] == ":"):
            raise ApiError(403, f"path refused: {quoted(part)} is absolute")
        if ".." in part.replace("\\", "/").split("/"):
            raise ApiError(403, f"path refused: {quoted(part)} leaves {folder}")
    joined = os.path.join(root, *[p for p in parts if p not in ("", ".")])
    real = os.path.realpath(joined)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise ApiError(403, f"path refused: it resolves outside {folder}")
    return real


def _server_origin(environ: Dict[str, Any]) -> str:
    scheme = environ.get("wsgi.url_scheme", "http")
    host = environ.get("HTTP_HOST") or f"{environ.get('SERVER_NAME', '')}:{environ.get('SERVER_PORT', '')}"
    return f"{scheme}://{host}".lower()


def check_origin(environ: Dict[str, Any]) -> None:
    """403 unless the request comes from a page served by this server (CSRF guard for every POST).

    Browsers send ``Origin`` on every POST made by fetch; when it is absent we accept only
    ``Sec-Fetch-Site: same-origin``. Scripts (curl) must send ``Origin: http://<host>:<port>`` themselves.
    """
    origin = environ.get("HTTP_ORIGIN")
    if origin is None or origin == "":
        if environ.get("HTTP_SEC_FETCH_SITE") == "same-origin":
            return
        raise ApiError(403, "write refused: no Origin header (send Origin equal to this server's origin)")
    if origin == "null":
        raise ApiError(403, "cross-origin request refused (Origin: null)")
    got = urlsplit(origin)
    want = urlsplit(_server_origin(environ))
    if (got.scheme.lower(), _host_port(got)) != (want.scheme.lower(), _host_port(want)):
        raise ApiError(403, f"cross-origin request refused (Origin {origin})")


def _host_port(parts) -> str:
    default = 443 if parts.scheme == "https" else 80
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or default
    except ValueError:
        port = -1
    return f"{host}:{port}"


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs) -> Dict[str, Any]:
    """json.loads keeps the last of repeated keys: two legend entries of one colour would lose one unseen."""
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_json_post(request, max_bytes: int = MAX_BODY_BYTES) -> Dict[str, Any]:
    """The JSON object of a POST after the origin, type and size checks (403 / 415 / 413 / 400)."""
    check_origin(request.environ)
    mimetype = (request.mimetype or "").lower()
    if mimetype != "application/json":
        raise ApiError(415, "the body must be JSON (Content-Type: application/json)")
    length: Optional[int] = request.content_length
    if length is not None and length > max_bytes:
        raise ApiError(413, f"request body over {max_bytes} bytes")
    raw = request.stream.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ApiError(413, f"request body over {max_bytes} bytes")
    try:
        body = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ApiError(400, f"the body repeats the key {quoted(exc, 60)}") from None
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, "the body is not valid JSON") from None
    except RecursionError:      # ("[" * 100000: the decoder's recursion, a 500 before)
        raise ApiError(400, "the body is nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body
