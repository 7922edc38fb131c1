"""Finding the rank folders of a dump directory, in every layout the reference writes or users hand over.

Accepted (REFERENCE.md section 1):
    dump_path/step{N}/rank{R}/dump.json      a folder of step folders
    step{N}/rank{R}/dump.json                a step folder of ranks
    step{N}/proc{pid}/dump.json              a run without torch.distributed (rank 0; several procs: ranks by pid order)
    rank/dump.json                           a bare `rank` folder (rank 0)
    any_folder/dump.json                     a single folder holding the files
A path to a dump.json itself is read as its folder. Step and rank come from the folder names; a folder name that
says neither gives step 0 / rank 0.
"""
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple, Union

from tbprobe.errors import FormatError

__all__ = ["RankDir", "discover", "parse_step", "parse_rank"]

DUMP_JSON = "dump.json"
CONSTRUCT_JSON = "construct.json"
STACK_JSON = "stack.json"

_STEP_RE = re.compile(r"^step(\d+)$")
_RANK_RE = re.compile(r"^rank(\d+)$")
_PROC_RE = re.compile(r"^proc(\d+)$")


@dataclass(frozen=True)
class RankDir:
    """One rank of one step: the folder and its three files (construct/stack are None when absent)."""

    step: int
    rank: int
    path: Path
    dump_json: Path
    construct_json: Optional[Path]
    stack_json: Optional[Path]
    # The folder name as found (rank3, proc1234, rank, ...): tells a user which folder a rank number came from.
    label: str = field(default="", compare=False)


def parse_step(name: str) -> Optional[int]:
    m = _STEP_RE.match(name)
    return int(m.group(1)) if m else None


def parse_rank(name: str) -> Optional[int]:
    """rank{R} -> R; bare `rank` -> 0; anything else (proc folders included) -> None."""
    if name == "rank":
        return 0
    m = _RANK_RE.match(name)
    return int(m.group(1)) if m else None


def _is_rank_folder(name: str) -> bool:
    return name == "rank" or bool(_RANK_RE.match(name) or _PROC_RE.match(name))


def _rank_dir(folder: Path, step: int, rank: int) -> RankDir:
    dump = folder / DUMP_JSON
    if not dump.is_file():
        if (folder / "debug.json").is_file():
            raise FormatError(folder, "only debug.json here: a level-debug dump holds save()'d values, not a model "
                                      "graph (collect at L0, L1 or mix to build one)")
        raise FormatError(folder, f"no {DUMP_JSON} in this rank folder (expected {DUMP_JSON}, construct.json, stack.json)")
    construct = folder / CONSTRUCT_JSON
    stack = folder / STACK_JSON
    return RankDir(
        step=step,
        rank=rank,
        path=folder,
        dump_json=dump,
        construct_json=construct if construct.is_file() else None,
        stack_json=stack if stack.is_file() else None,
        label=folder.name,
    )


def _subdirs(folder: Path) -> List[Path]:
    try:
        return sorted((p for p in folder.iterdir() if p.is_dir()), key=lambda p: p.name)
    except PermissionError:
        raise FormatError(folder, "permission denied while listing the folder") from None


def _ranks_of_step(folder: Path, step: int) -> List[RankDir]:
    """The rank folders inside one step folder. proc{pid} folders count as rank 0 when alone; several of them
    (a multi-process run without torch.distributed) get ranks in pid order so each stays distinct."""
    found: List[Tuple[int, RankDir]] = []
    procs: List[Tuple[int, Path]] = []
    for sub in _subdirs(folder):
        rank = parse_rank(sub.name)
        if rank is not None:
            found.append((rank, _rank_dir(sub, step, rank)))
            continue
        m = _PROC_RE.match(sub.name)
        if m:
            procs.append((int(m.group(1)), sub))
    if procs:
        taken = {r for r, _ in found}
        free = (r for r in range(len(taken) + len(procs)) if r not in taken)
        for _, sub in sorted(procs):
            rank = next(free)
            found.append((rank, _rank_dir(sub, step, rank)))
    seen = set()
    for rank, rd in found:
        if rank in seen:  # `rank` and `rank0` side by side: two folders claim rank 0
            raise FormatError(folder, f"two folders claim rank {rank} (one is {rd.label})")
        seen.add(rank)
    return [rd for _, rd in sorted(found, key=lambda t: t[0])]


def discover(path: Union[str, Path]) -> List[RankDir]:
    """Every rank folder under `path`, sorted by (step, rank). Raises FormatError naming the folder and what was
    expected when the layout is unknown or nothing holds a dump.json."""
    root = Path(path)
    if root.is_file():
        if root.name != DUMP_JSON:
            raise FormatError(root, f"expected a dump folder or a {DUMP_JSON}, found another file")
        root = root.parent
    if not root.exists():
        raise FormatError(root, "no such folder")
    if not root.is_dir():
        raise FormatError(root, "not a folder")

    if (root / DUMP_JSON).is_file():  # a single folder holding the files
        step = parse_step(root.parent.name)
        rank = parse_rank(root.name)
        return [_rank_dir(root, step if step is not None else 0, rank if rank is not None else 0)]

    subs = _subdirs(root)
    if any(_is_rank_folder(s.name) for s in subs):  # a step folder of ranks
        step = parse_step(root.name)
        result = _ranks_of_step(root, step if step is not None else 0)
    else:
        steps = [(parse_step(s.name), s) for s in subs]
        steps = [(n, s) for n, s in steps if n is not None]
        if not steps:
            raise FormatError(
                root,
                f"unknown dump layout: expected {DUMP_JSON} here, rank*/proc* folders, or step* folders of ranks",
            )
        result = []
        for n, s in sorted(steps, key=lambda t: t[0]):
            result.extend(_ranks_of_step(s, n))
    if not result:
        raise FormatError(root, f"no rank folder with a {DUMP_JSON} found (expected step*/rank*/{DUMP_JSON})")
    return sorted(result, key=lambda rd: (rd.step, rd.rank))
