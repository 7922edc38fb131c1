"""Request checks shared by every route: paths stay inside the log directory, writes come from our own origin
under a name of this server, bodies are small JSON objects.

The reference plugin joins user-supplied names onto the log directory unchecked (path traversal) and accepts
cross-site POSTs; here every path goes through :func:`resolve_inside` and every write through :func:`read_json_post`.
"""
import ipaddress
import json
import os
import socket
from typing import Any, Dict, FrozenSet, Optional
from urllib.parse import urlsplit

from tbprobe.tb_plugin.api_error import ApiError, quoted

__all__ = ["MAX_BODY_BYTES", "ALLOWED_HOSTS_ENV", "HostCheck", "resolve_inside", "check_origin", "read_json_post"]

ALLOWED_HOSTS_ENV = "TBPROBE_ALLOWED_HOSTS"

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


def _host_name(host: str) -> Optional[str]:
    """The name in a Host header (``name:port``, ``[::1]:port``), lowercased, without a trailing dot; None when it
    is no host name."""
    if any(c.isspace() or c in "/\\@?#" for c in host):
        return None
    try:
        name = urlsplit("//" + host).hostname
    except ValueError:
        return None
    if not name:
        return None
    return name.rstrip(".").lower() or None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
        return True
    except ValueError:
        return False


class HostCheck:
    """The names a write's ``Host`` header may give: the guard against DNS rebinding, where a page of the attacker's
    own name (``evil.example``, re-resolved to this machine) is same-origin with itself, so the Origin check alone
    passes (Origin and Host both ``evil.example:<port>``).

    Allowed: ``localhost`` and names under ``.localhost``; IP addresses (rebinding needs a name; a page whose origin
    is this address and port is this server's own); the name TensorBoard was started with (``--host``); this
    machine's own names (``socket.gethostname()``, ``socket.getfqdn()``, looked up only when needed); and the
    names in ``TBPROBE_ALLOWED_HOSTS`` (comma-separated; ``.example.com`` allows its subdomains, ``*`` any name:
    for a reverse proxy or a DNS alias). The same with ``--bind_all`` or ``--host 0.0.0.0``: reached from the
    network by an IP address or the machine's name, writes pass; by another name, they are refused with the
    variable to set. Reads are not checked (TensorBoard's own routes are not either)."""

    def __init__(self, flags: Any = None, environ: Optional[Dict[str, str]] = None):
        env = os.environ if environ is None else environ
        names = set()
        bound = getattr(flags, "host", None)
        if isinstance(bound, str) and bound.strip():
            names.add(bound.strip().rstrip(".").lower())
        self.any = False
        for item in (env.get(ALLOWED_HOSTS_ENV) or "").split(","):
            item = item.strip().rstrip(".").lower()
            if item == "*":
                self.any = True
            elif item:
                names.add(item)
        self.configured: FrozenSet[str] = frozenset(names)
        self._machine: Optional[FrozenSet[str]] = None

    def _machine_names(self) -> FrozenSet[str]:
        if self._machine is None:
            found = set()
            for lookup in (socket.gethostname, socket.getfqdn):
                try:
                    name = lookup()
                except OSError:
                    continue
                if name:
                    found.add(name.rstrip(".").lower())
            self._machine = frozenset(found)
        return self._machine

    def allows(self, name: str) -> bool:
        if self.any or name == "localhost" or name.endswith(".localhost") or _is_ip(name):
            return True
        if name in self.configured or any(n.startswith(".") and name.endswith(n) for n in self.configured):
            return True
        return name in self._machine_names()

    def check(self, environ: Dict[str, Any]) -> None:
        """403 unless the request's Host header names this server (absent: not a browser, which always sends it)."""
        host = environ.get("HTTP_HOST")
        if host is None or self.any:
            return
        name = _host_name(host)
        if name is None:
            raise ApiError(403, f"write refused: the Host header {quoted(host, 100)} is not a host name")
        if not self.allows(name):
            raise ApiError(403, f"write refused: {quoted(name, 100)} is not a name of this server (a guard against "
                                "DNS rebinding; writes answer to localhost, IP addresses, --host and this machine's "
                                f"names): to allow it, start TensorBoard with {ALLOWED_HOSTS_ENV}={name}")


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


def read_json_post(request, max_bytes: int = MAX_BODY_BYTES, hosts: Optional[HostCheck] = None) -> Dict[str, Any]:
    """The JSON object of a POST after the host, origin, type and size checks (403 / 415 / 413 / 400)."""
    (hosts or HostCheck()).check(request.environ)
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
