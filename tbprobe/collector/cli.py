"""`tbprobe config check config.json`: validate a collector config.json without training."""
import argparse

from tbprobe.collector.config import load_config

__all__ = ["register"]


def _check(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)   # raises TbprobeError (one line) on any problem
    print(f"{args.config}: ok (task {cfg.task}, level {cfg.level}, summary_mode {cfg.summary_mode}, "
          f"steps {list(cfg.steps) or 'all'}, ranks {list(cfg.ranks) or 'all'})")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("config", help="collector configuration tools")
    sub = p.add_subparsers(dest="config_command", metavar="ACTION")
    check = sub.add_parser("check", help="validate a collector config.json (msprobe's keys)")
    check.add_argument("config", help="path to config.json")
    check.set_defaults(func=_check)
