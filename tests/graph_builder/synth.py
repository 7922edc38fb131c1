"""Small synthetic dump folders for tests: copies of the fixtures with names rewritten, or hand-made entries."""
import json
import re
from pathlib import Path
from typing import Callable, Dict, Optional

from tests.graph_builder.golden import INPUTS

_API = re.compile(r"^(.*)\.(\d+)\.(forward|backward)$")
_MOD = re.compile(r"^(Module\..*)\.(forward|backward)\.(\d+)$")


def read_rank(src: str) -> Dict[str, dict]:
    base = INPUTS / src / "step0" / "rank0"
    return {name: json.loads((base / name).read_text()) for name in ("dump.json", "construct.json", "stack.json")}


def write_rank(folder: Path, docs: Dict[str, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, doc in docs.items():
        (folder / name).write_text(json.dumps(doc))
    return folder


def rename_all(docs: Dict[str, dict], rename: Callable[[str], str]) -> Dict[str, dict]:
    dump = dict(docs["dump.json"])
    dump["data"] = {rename(k): v for k, v in dump["data"].items()}
    construct = {rename(k): (rename(v) if isinstance(v, str) else v) for k, v in docs["construct.json"].items()}
    stack = {k: [[rename(n) for n in v[0]], v[1]] for k, v in docs["stack.json"].items()}
    return {"dump.json": dump, "construct.json": construct, "stack.json": stack}


def next_step_names(docs: Dict[str, dict]) -> Callable[[str], str]:
    """Names as the next step of the same run writes them: API counters continue from this step's counts and
    every module call counter moves on by one."""
    counts: Dict[str, int] = {}
    for name in docs["dump.json"]["data"]:
        m = _API.match(name)
        if m and not name.startswith("Module."):
            counts[m.group(1)] = max(counts.get(m.group(1), 0), int(m.group(2)) + 1)

    def rename(name: str) -> str:
        m = _MOD.match(name)
        if m:
            return f"{m.group(1)}.{m.group(2)}.{int(m.group(3)) + 1}"
        if ".parameters_grad" in name:
            return name
        m = _API.match(name)
        if m:
            return f"{m.group(1)}.{int(m.group(2)) + counts.get(m.group(1), 0)}.{m.group(3)}"
        return name

    return rename


def tensor(shape, mx=1.0, mn=-1.0, mean=0.0, norm=2.0, dtype="torch.float32", grad=False) -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm, "requires_grad": grad}


def api_entry(inp: Optional[list] = None, out: Optional[list] = None) -> dict:
    return {"input_args": inp or [tensor((2, 2))], "input_kwargs": {}, "output": out or [tensor((2, 2))]}


def simple_rank(folder: Path, data: Dict[str, dict], construct: Dict[str, object], task: str = "statistics",
                stack: Optional[dict] = None, extra: Optional[Dict[str, object]] = None) -> Path:
    docs = {"dump.json": {"task": task, "level": "mix", "framework": "pytorch", "dump_data_dir": None,
                          "data": data},
            "construct.json": construct, "stack.json": stack or {}}
    write_rank(folder, docs)
    for name, doc in (extra or {}).items():
        (folder / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return folder
