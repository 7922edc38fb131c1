"""The `tbprobe` command. Each part of the package adds its own sub-commands through a `register(subparsers)`
function in its `cli` module; this file only assembles them and turns user errors into one clear line."""
import argparse
import importlib
import os
import select
import signal
import sqlite3
import sys
from typing import List, Optional

from tbprobe import __version__
from tbprobe.errors import TbprobeError

__all__ = ["main", "build_parser", "run"]

# Modules that contribute sub-commands; each has `register(subparsers) -> None`. A missing one is skipped so a
# partial install still runs the rest.
_COMMAND_MODULES = [
    "tbprobe.formats.cli",
    "tbprobe.graph_builder.cli",
    "tbprobe.collector.cli",
    "tbprobe.monitor.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tbprobe",
        description="Find where numerical precision goes wrong in deep-learning training.",
    )
    parser.add_argument("--version", action="version", version=f"tbprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def run(parser: argparse.ArgumentParser, argv: Optional[List[str]] = None) -> int:
    """Parse, dispatch to the chosen sub-command, and turn user errors into one line and exit code 2."""
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    previous = _terminate_as_exception()
    try:
        code = int(args.func(args) or 0)
        # a reader that closed the pipe (`| head -1`) shows here, not in the interpreter's flush at exit
        _flush_stdout()
        return code
    except BrokenPipeError as exc:
        if not _stdout_broken():   # (another pipe's, a helper's or a socket's: an error like any OSError)
            print(f"tbprobe: error: {_environment_error(exc)}", file=sys.stderr)
            return 2
        # as Unix tools do: no message, the status of a process that SIGPIPE ended
        _quiet_stdout()
        return 128 + _SIGPIPE
    except _Terminated as exc:
        _say("tbprobe: terminated" if exc.signum == signal.SIGTERM else "tbprobe: terminated (hangup)")
        return 128 + exc.signum
    except TbprobeError as exc:
        print(f"tbprobe: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error, UnicodeError, RecursionError) as exc:
        # what the machine or the input's text can do to any command past its own checks (a disk full at the
        # database's commit, a name with a lone surrogate escape, which JSON allows and UTF-8 refuses): one line
        print(f"tbprobe: error: {_environment_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _say("tbprobe: interrupted")
        return 130
    finally:
        for signum, handler in (previous or {}).items():
            signal.signal(signum, handler)


_SIGPIPE = getattr(signal, "SIGPIPE", 13)


def _flush_stdout() -> None:
    if sys.stdout is None:   # (started with stdout closed: nothing to flush)
        return
    try:
        sys.stdout.flush()
    except ValueError:       # (a stdout closed in-process)
        pass


def _stdout_broken() -> bool:
    """Whether stdout is a pipe whose reader has gone: poll() reports an error on its write end."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):   # (no poll on this system, or no descriptor behind stdout)
        return False


def _quiet_stdout() -> None:
    """Point stdout at the null device: what is left in its buffer would raise again when the interpreter
    flushes it at exit ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):   # a stdout without a file descriptor (replaced in-process) has no exit flush
        pass


def _say(line: str) -> None:
    """The last line on stderr, which a hung-up terminal may no longer take (the exit code still tells)."""
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError):
        pass


# SIGHUP (the terminal closed, `kill -HUP`) as SIGTERM: by default it killed tbprobe outright, leaving the
# half-written .vis.db's temporary file and the row helper's temporary database (and an orphaned helper)
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class _Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the command runs: its cleanup (a half-written .vis.db's temporary file,
    the output folder it made, the temporary files of its helper processes, which it stops) runs as for Ctrl-C;
    the default action left them behind. The child processes do not inherit the handler
    (graph_builder/workers.py: they stay quiet and leave the cleanup to this process)."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame) -> None:
    # once is enough: a second SIGTERM while the cleanup runs would cut it short
    for other in _STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    raise _Terminated(signum)


def _terminate_as_exception():
    """Install the SIGTERM and SIGHUP handlers; returns {signal: the handler it replaces} (None off the main
    thread, where none can be set). A signal ignored already stays ignored (`nohup tbprobe ...`)."""
    try:
        return {signum: signal.signal(signum, _raise_terminated) for signum in _STOP_SIGNALS
                if signal.getsignal(signum) is not signal.SIG_IGN}
    except ValueError:
        return None


def _environment_error(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    if isinstance(exc, sqlite3.Error):
        return f"cannot write the database ({exc})"
    if isinstance(exc, UnicodeEncodeError):
        bad = exc.object[exc.start:exc.end] if isinstance(exc.object, str) else ""
        return f"the input holds text that is not valid Unicode ({bad!r}: a lone surrogate escape)"
    if isinstance(exc, UnicodeError):
        return f"the input's text is not valid Unicode ({exc})"
    return "the input is nested too deeply"


def main(argv: Optional[List[str]] = None) -> int:
    return run(build_parser(), argv)
