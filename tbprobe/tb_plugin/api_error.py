"""The one error type the routes turn into a JSON 4xx answer: a status and one clear sentence."""

__all__ = ["ApiError"]


class ApiError(Exception):
    """A request the plugin refuses: ``status`` is the HTTP code, ``message`` is shown to the user as is."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message
