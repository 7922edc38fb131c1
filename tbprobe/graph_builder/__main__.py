"""`python -m tbprobe.graph_builder graph|compare ...`: the graph builder's commands alone (same as `tbprobe graph`,
without loading the other parts' command modules)."""
import argparse
import sys

from tbprobe.errors import TbprobeError
from tbprobe.graph_builder.cli import register


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tbprobe.graph_builder")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args()
    try:
        return int(args.func(args) or 0)
    except TbprobeError as exc:
        print(f"tbprobe: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
