"""`tbprobe inspect PATH`: what a dump directory, a .vis.db, a legacy .vis or a .vis.config holds.

Useful before building or comparing (which layout was found, which steps and ranks, how many entries) and as
the quickest way to get the one-line message for a broken file."""
import argparse
from pathlib import Path
from typing import List

from tbprobe.errors import TbprobeError

__all__ = ["register", "inspect_path"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="show what a dump directory or graph database holds",
        description="Show what a dump directory (any layout msprobe or tbprobe writes), a .vis.db graph "
        "database, a legacy .vis file or a .vis.config holds.",
    )
    p.add_argument("path", help="dump folder (step*/rank*/dump.json, ...), dump.json, .vis.db, .vis or .vis.config")
    p.add_argument("--validate", action="store_true", help="decode every dump.json entry now (slower)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    for line in inspect_path(Path(args.path), validate=args.validate):
        print(line)
    return 0


def inspect_path(path: Path, validate: bool = False) -> List[str]:
    if not path.exists():
        raise TbprobeError(f"{path}: no such file or folder")
    name = path.name
    handlers: List[tuple] = [
        (lambda: name.endswith(".vis.db") or _is_sqlite(path), _inspect_db),
        (lambda: name.endswith(".vis.config"), _inspect_matches),
        (lambda: name.endswith(".vis"), _inspect_vis),
    ]
    for test, handler in handlers:
        if path.is_file() and test():
            return handler(path)
    return _inspect_dump(path, validate)


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _inspect_dump(path: Path, validate: bool) -> List[str]:
    from tbprobe.formats.construct_json import load_construct
    from tbprobe.formats.dump_dir import discover
    from tbprobe.formats.dump_json import load_dump
    from tbprobe.formats.stack_json import load_stack

    ranks = discover(path)
    steps = sorted({rd.step for rd in ranks})
    lines = [f"dump directory {path}: {len(ranks)} rank folder(s), steps {steps}, "
             f"ranks {sorted({rd.rank for rd in ranks})}"]
    lines.append(f"{'step':>5} {'rank':>5}  {'folder':<16} {'task':<11} {'level':<6} {'entries':>8} "
                 f"{'construct':>9} {'stacks':>7}")
    for rd in ranks:
        dump = load_dump(rd.dump_json)
        if validate:
            dump.entries.validate()
        construct = len(load_construct(rd.construct_json).parents) if rd.construct_json else "-"
        stacks = len(load_stack(rd.stack_json).stacks) if rd.stack_json else "-"
        lines.append(f"{rd.step:>5} {rd.rank:>5}  {rd.label:<16} {dump.task:<11} {dump.level:<6} "
                     f"{len(dump.entries):>8} {construct:>9} {stacks:>7}")
    return lines


def _inspect_db(path: Path) -> List[str]:
    from tbprobe.formats.vis_db import VisDbReader

    with VisDbReader(path) as r:
        cfg = r.config()
        writer = f"tbprobe schema {r.schema_version} ({r.meta().get('writer', '?')})" if r.is_tbprobe else "msprobe"
        lines = [f"graph database {path}: {cfg['graph_type']} graph, task {cfg['task'] or '-'}, written by {writer}",
                 f"steps {cfg['step_list']}, ranks {cfg['rank_list']}, micro steps {cfg['micro_steps']}, "
                 f"overflow check {'on' if cfg['overflow_check'] else 'off'}, {len(r.stacks())} stack record(s)",
                 f"{'step':>5} {'rank':>5}  {'side':<6} {'nodes':>7}"]
        for step, rank, side in r.graphs():
            lines.append(f"{step:>5} {rank:>5}  {side:<6} {r.node_count(step, rank, side):>7}")
    return lines


def _inspect_vis(path: Path) -> List[str]:
    from tbprobe.formats.vis_json import SIDES, load_vis_json

    doc = load_vis_json(path)
    sides = [f"{side} {len(doc[side]['node'])} nodes" for side in SIDES if side in doc]
    return [f"legacy .vis graph {path}: {', '.join(sides)}, task {doc.get('task', '-')}"]


def _inspect_matches(path: Path) -> List[str]:
    from tbprobe.formats.vis_config import load_matches

    return [f"manual matches {path}: {len(load_matches(path))} pair(s)"]


