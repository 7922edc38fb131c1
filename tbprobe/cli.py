"""The `tbprobe` command. Each part of the package adds its own sub-commands through a `register(subparsers)`
function in its `cli` module; this file only assembles them and turns user errors into one clear line."""
import argparse
import importlib
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
    try:
        return int(args.func(args) or 0)
    except TbprobeError as exc:
        print(f"tbprobe: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tbprobe: interrupted", file=sys.stderr)
        return 130


def main(argv: Optional[List[str]] = None) -> int:
    return run(build_parser(), argv)
