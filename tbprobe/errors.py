"""The one exception type users see: a message that names the file (or input) and the problem."""
from typing import Optional

__all__ = ["TbprobeError", "FormatError", "BusyError"]


class TbprobeError(Exception):
    """An error caused by the user's input or environment, shown as one clear line, never a traceback."""


class FormatError(TbprobeError):
    """A file that cannot be read as the format it should have: names the file and the problem."""

    def __init__(self, path: object, problem: str, line: Optional[int] = None):
        self.path = str(path)
        self.problem = problem
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):
        # Worker processes send errors back by pickling; the default would call __init__ with the message only.
        return (FormatError, (self.path, self.problem, self.line))


class BusyError(FormatError):
    """A file another program holds locked just now: the problem may pass (asking again later may succeed)."""

    def __reduce__(self):
        return (BusyError, (self.path, self.problem, self.line))
