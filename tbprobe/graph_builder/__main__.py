"""`python -m tbprobe.graph_builder graph|compare ...`: the graph builder's commands alone (same as `tbprobe graph`,
without loading the other parts' command modules)."""
import argparse
import gc
import sys

from tbprobe.cli import run
from tbprobe.graph_builder.cli import register


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tbprobe.graph_builder")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    return run(parser)


if __name__ == "__main__":
    code = main()
    # the graphs just written are garbage now: leave them to the process's end instead of a last collection
    # walking them at interpreter exit (0.14 s after a 100k-node build)
    gc.freeze()
    sys.exit(code)
