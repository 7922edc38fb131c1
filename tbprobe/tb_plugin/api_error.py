"""The one error type the routes turn into a JSON 4xx answer: a status and one clear sentence."""

__all__ = ["ApiError", "quoted"]


class ApiError(Exception):
    """A request the plugin refuses: ``status`` is the HTTP code, ``message`` is shown to the user as is."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def quoted(text: str, limit: int = 200) -> str:
    """``text`` in single quotes for a message, as written: ``repr`` doubled every backslash (a run ``a\\b`` read
    ``'a\\\\b'``); only characters that would not show (controls, line breaks) are escaped. Cut at ``limit``."""
    text = str(text)
    cut = len(text) > limit
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return f"'{shown}{'…' if cut else ''}'"
