"""`python -m tbprobe.graph_builder graph|compare ...`: the graph builder's commands alone (same as `tbprobe graph`,
without loading the other parts' command modules)."""
import argparse
import sys

from tbprobe.cli import run
from tbprobe.graph_builder.cli import register


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tbprobe.graph_builder")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    return run(parser)


if __name__ == "__main__":
    sys.exit(main())
