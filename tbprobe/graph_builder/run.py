"""`run_graph`: dump folders in, one build_<ts>.vis.db / compare_<ts>.vis.db out, every step and rank inside.

Ranks are processed in a process pool (one job per step x rank), the parent links communication nodes across
ranks and writes everything in one transaction through VisDbWriter (temporary file renamed at the end, removed
on any error). What only several ranks need (worker databases, the cross-rank links) is imported when used."""
import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from tbprobe.errors import TbprobeError
from tbprobe.formats.dump_dir import RankDir, discover, parse_step
from tbprobe.formats.vis_db import VisDbWriter
from tbprobe.graph_builder.config_text import TASK_OF_MODE, node_colors, tool_tip
from tbprobe.graph_builder.engine import Options, RankSummary, process_rank
from tbprobe.graph_builder.model import Graph
from tbprobe.graph_builder.rows import COL_MATCHED_DISTRIBUTED

__all__ = ["run_graph", "GraphResult", "pair_rank_dirs", "unpaired_keys", "format_summary"]


@dataclass
class GraphResult:
    path: Path
    graph_type: str
    mode: Optional[str]
    summary: Dict[str, object] = field(default_factory=dict)

    def summary_text(self) -> str:
        """The closing summary the command prints."""
        return format_summary(self)


def pair_rank_dirs(debug: List[RankDir], bench: Optional[List[RankDir]], debug_path: str,
                   bench_path: Optional[str]) -> List[Tuple[RankDir, Optional[RankDir]]]:
    if bench is None:
        return [(d, None) for d in debug]
    by_key = {(b.step, b.rank): b for b in bench}
    keys_d = [(d.step, d.rank) for d in debug]
    if set(keys_d) == set(by_key):
        return [(d, by_key[(d.step, d.rank)]) for d in debug]
    if len(debug) == 1 and len(bench) == 1:  # one rank against one rank: e.g. step 0 of a run against step 1
        return [(debug[0], bench[0])]
    if set(keys_d) & set(by_key) and not any(_holds_files(p) for p in (debug_path, bench_path)):
        # the steps and ranks both sides have (a run with a rank filter against a full one, a rank that died),
        # as the reference compares them; unpaired_keys() names the others for the summary
        return [(d, by_key[(d.step, d.rank)]) for d in debug if (d.step, d.rank) in by_key]
    raise TbprobeError(
        f"{bench_path}: its steps/ranks {sorted(by_key)} do not match those of {debug_path} {sorted(keys_d)}; "
        "give both sides the same layout (a rank folder, a step folder of ranks, or a folder of steps)")


def _holds_files(path: Optional[str]) -> bool:
    """Whether `path` is one rank's folder (or its dump.json) rather than a step folder or a folder of steps."""
    p = Path(path) if path else None
    return p is not None and (p.is_file() or (p / "dump.json").is_file())


def unpaired_keys(debug: List[RankDir], bench: Optional[List[RankDir]],
                  pairs: List[Tuple[RankDir, Optional[RankDir]]]) -> Dict[str, List[Tuple[int, int]]]:
    """The (step, rank) folders of each side that pair_rank_dirs left out: {"debug": [...], "bench": [...]}."""
    if bench is None:
        return {}
    used = {(d.step, d.rank) for d, _ in pairs}
    used_b = {(b.step, b.rank) for _, b in pairs if b is not None}
    left = {"debug": sorted((d.step, d.rank) for d in debug if (d.step, d.rank) not in used),
            "bench": sorted((b.step, b.rank) for b in bench if (b.step, b.rank) not in used_b)}
    return {k: v for k, v in left.items() if v}


def _check_out_dir(out_dir: str, create: bool = False) -> Path:
    """Fail early, before any work, when the output folder cannot be written; create it only when asked (just
    before writing), so a failed run leaves nothing behind. A symbolic link to a folder is followed; a dangling
    one (here or above) is an error that says so."""
    out = Path(out_dir)
    probe = out
    while not probe.exists():
        if probe.is_symlink():   # (the mkdir at the end said only "File exists", after all the work)
            try:
                target = f": its target {os.readlink(probe)} does not exist"
            except OSError:
                target = ""
            raise TbprobeError(f"{out}: cannot create the output folder ({probe} is a dangling symbolic link"
                               f"{target})")
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise TbprobeError(f"{out}: cannot create the output folder ({probe} is not a folder)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise TbprobeError(f"{out}: the output folder is not writable")
    if create:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TbprobeError(f"{out}: cannot create the output folder ({exc.strerror})") from None
    return out


def _job(args):
    """Worker entry: one rank into its own temporary database. User errors come back as text (exception
    classes with custom constructors do not survive the trip between processes)."""
    from tbprobe.graph_builder.temp_db import RankDb

    debug_dir, bench_dir, opts, temp_db = args
    sink = RankDb(temp_db)
    try:
        summary = process_rank(debug_dir, bench_dir, opts, sink)
    except TbprobeError as exc:
        sink.conn.close()
        return str(exc)
    except BaseException:
        sink.conn.close()
        raise
    sink.close()
    summary.temp_db = temp_db
    return summary


def _copy_rank(writer: VisDbWriter, summary: RankSummary, linked: Dict[str, dict]) -> None:
    """Stream one worker database into the output, patching the cross-rank links in on the way."""
    from tbprobe.graph_builder.temp_db import copy_all

    try:
        copy_all(str(summary.temp_db), writer, linked, COL_MATCHED_DISTRIBUTED)
    finally:
        os.unlink(str(summary.temp_db))


def _progress(total: int):
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety
        return None
    return tqdm(total=total, unit="rank", file=sys.stderr, disable=None, leave=False)


BIG_PAGE = 65536
# one rank's row work goes half to a forked helper only when at least this many cores were idle while its files
# were read (cpu_idle.py): on busy cores the helper's own costs outweigh what it shares
SPLIT_IDLE = 0.5


def run_graph(debug: str, bench: Optional[str], out_dir: str, *, overflow_check: bool = False, fuzzy: bool = False,
              layer_mapping: Optional[Mapping] = None, parallel: bool = True, align: bool = True,
              manual: Optional[Mapping[str, str]] = None, progress: bool = True,
              strict_dtype: bool = False) -> GraphResult:
    """Build (bench None) or compare (bench given) and write one .vis.db under out_dir."""
    out = _check_out_dir(out_dir)
    debug_dirs = discover(debug)
    bench_dirs = discover(bench) if bench else None
    pairs = pair_rank_dirs(debug_dirs, bench_dirs, debug, bench)
    workers = min(len(pairs), os.cpu_count() or 1) if parallel else 1
    opts = Options(overflow_check=overflow_check, fuzzy=fuzzy, align=align, layer_map=layer_mapping,
                   manual=manual, tensor_workers=(os.cpu_count() or 1) if parallel and len(pairs) == 1 else 1,
                   split=min(2, os.cpu_count() or 1) if parallel and len(pairs) == 1 else 1,
                   split_idle=SPLIT_IDLE, strict_dtype=strict_dtype,
                   comm_stubs=len(pairs) > 1)
    graph_type = "compare" if bench else "build"
    ts = time.strftime("%Y%m%d%H%M%S")
    path = out / f"{graph_type}_{ts}.vis.db"
    n = 1
    while path.exists():
        path = out / f"{graph_type}_{ts}_{n}.vis.db"
        n += 1
    started = time.perf_counter()
    bar = _progress(len(pairs)) if progress else None
    results: List[RankSummary] = []
    rows_done = 0

    def collect(result) -> None:
        nonlocal rows_done
        if isinstance(result, str):
            raise TbprobeError(result)
        results.append(result)
        rows_done += result.rows
        if bar is not None:
            rate = rows_done / max(time.perf_counter() - started, 1e-6)
            bar.set_postfix_str(f"step {result.step} rank {result.rank} {rate:,.0f} nodes/s")
            bar.update(1)

    created = not out.exists()
    writer: Optional[VisDbWriter] = None
    temp_dir = None
    try:
        # (inside the try: a signal (SIGINT, SIGTERM, SIGHUP) anywhere from here on removes what was made)
        _check_out_dir(out_dir, create=True)
        # rebuildable from the dumps: no fsync (about 0.5 s per 20k entries); 64 KB pages hold a node row's few KB
        # of input/output text without overflow pages (inserts about 2x faster). The indexes are built at the end:
        # keeping them up to date while 200k rows go in costs more (measured 6.8 s against 2.3 s + 3.1 s at 100k)
        writer = VisDbWriter(path, sync=False, page_size=BIG_PAGE)
        if len(pairs) == 1:  # one rank: straight into the output, no copy
            collect(process_rank(pairs[0][0], pairs[0][1], opts, writer))
        else:
            import tempfile

            temp_dir = tempfile.mkdtemp(prefix=".tbprobe-", dir=str(out))
            jobs = [(d, b, opts, os.path.join(temp_dir, f"rank_{i}.db")) for i, (d, b) in enumerate(pairs)]
            if workers > 1:
                from tbprobe.graph_builder.workers import worker_pool  # several ranks only: not at start-up

                with worker_pool(workers) as pool:
                    for result in pool.map(_job, jobs):
                        collect(result)
            else:
                for job in jobs:
                    collect(_job(job))
            linked = _link_distributed(results)
            for result in results:
                _copy_rank(writer, result, linked)
        mode = next((r.mode for r in results if r.mode), None)
        writer.set_config(graph_type, TASK_OF_MODE.get(mode, "") if bench else "",
                          tool_tip(mode) if bench else None,
                          max((r.micro_steps for r in results), default=1), 1 if overflow_check else 0,
                          node_colors(mode) if bench else None,
                          sorted({r.rank for r in results}), sorted({r.step for r in results}))
        writer.set_meta("inputs", {"debug": str(debug), "bench": str(bench) if bench else None})
        # (the plugin compares a manually matched pair again: it must grade dtypes as this build did; files
        # without the key, older tbprobe's and the reference's, grade by the default)
        writer.set_meta("strict_dtype", "1" if strict_dtype else "0")
        final = writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        if created:
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        if bar is not None:
            with contextlib.suppress(OSError):   # (a terminal that hung up: the rest of the cleanup still runs)
                bar.close()
        if temp_dir is not None:
            import shutil

            shutil.rmtree(temp_dir, ignore_errors=True)
    summary = _summary(results, final, time.perf_counter() - started)
    left_out = unpaired_keys(debug_dirs, bench_dirs, pairs)
    if left_out:
        summary["left_out"] = left_out
    notes = _input_notes("debug", debug, debug_dirs) + (_input_notes("bench", bench, bench_dirs) if bench else [])
    notes += [f"debug step {r.step} rank {r.rank}: its dump.json holds no records"
              for r in sorted(results, key=lambda r: (r.step, r.rank)) if r.counts.get("nodes", 0) <= 1]
    levels = sorted({r.levels for r in results if r.levels[0] and r.levels[1] and r.levels[0] != r.levels[1]})
    notes += [f"debug dumped at level {d}, bench at {b}: only the nodes both levels record can match "
              f"({'modules' if 'L0' in (d, b) else 'operators'}); the others are unmatched" for d, b in levels]
    if bench and layer_mapping:
        notes += unused_rule_notes(results)
    if notes:
        summary["notes"] = notes
    summary["overflow_check"] = overflow_check
    return GraphResult(final, graph_type, mode, summary)


def unused_rule_notes(results: List[RankSummary]) -> List[str]:
    """The layer mapping's warnings that hold for every rank pair that looked at the mapping (a rule no pair's
    names hold: a typo, or a class path that is not there; it was silent, the run looking just like an unmapped
    one). A pair that did not look (unused_rules None) has no say: it made the intersection empty."""
    looked = [set(r.unused_rules) for r in results if r.unused_rules is not None]
    return sorted(set.intersection(*looked)) if looked else []


def _input_notes(side: str, root: str, dirs: List[RankDir]) -> List[str]:
    """What a damaged or partial input lacks, for the summary: a graph built from it without a word looked whole
    (a missing construct.json gives a flat graph, whose compare against an intact dump matches nothing)."""
    notes = [f"{side} step {d.step} rank {d.rank}: no construct.json, so its nodes are not nested under their "
             "modules" for d in dirs if d.construct_json is None]
    notes += _proc_notes(side, dirs)
    folder = Path(root)
    found = {d.step for d in dirs}
    if folder.is_dir() and not (folder / "dump.json").is_file():
        try:
            subs = sorted(p for p in folder.iterdir() if p.is_dir())
        except OSError:
            subs = []
        for sub in subs:
            step = parse_step(sub.name)
            if step is not None and step not in found:
                notes.append(f"{side} {sub.name}: no rank folder with a dump.json, left out")
    return notes


def _proc_notes(side: str, dirs: List[RankDir]) -> List[str]:
    """proc{pid} folders (processes without torch.distributed) carry no rank: several in one step get ranks 0, 1,
    ... in pid order, which need not be the order of the other side's processes, so the summary says so."""
    by_step: Dict[int, List[RankDir]] = {}
    for d in dirs:
        if d.label.startswith("proc"):
            by_step.setdefault(d.step, []).append(d)
    several = {step: ds for step, ds in by_step.items() if len(ds) > 1}
    if not several:
        return []
    step, ds = min(several.items())
    named = ", ".join(f"{d.label} as rank {d.rank}" for d in ds[:4]) + (", ..." if len(ds) > 4 else "")
    return [f"{side}: proc{{pid}} folders (no torch.distributed rank) are paired by pid order ({named} in step "
            f"{step}); a pid need not say which process is which"]


def _link_distributed(results: List[RankSummary]) -> Dict[str, dict]:
    """Cross-rank links of the communication nodes of every step and side: row id -> matched_distributed."""
    from tbprobe.graph_builder.distributed import link_ranks

    by_step_side: Dict[Tuple[int, str], List] = {}
    for r in results:
        for side, stubs in r.comm.items():
            by_step_side.setdefault((r.step, side), []).append((r, stubs))
    linked: Dict[str, dict] = {}
    for (step, side), members in by_step_side.items():
        if len(members) < 2:
            continue
        graphs = []
        for r, stubs in members:
            g = Graph(side, step, r.rank)
            for s in stubs:
                g.nodes[s.name] = s
            graphs.append(g)
        link_ranks(graphs)
        for r, stubs in members:
            for s in stubs:
                if s.distributed:
                    linked[f"{side}_{step}_{r.rank}_{s.name}"] = s.distributed
    return linked


def _summary(results: List[RankSummary], path: Path, seconds: float) -> Dict[str, object]:
    total: Dict[str, object] = {"nodes": 0, "matched": 0, "pass": 0, "warning": 0, "error": 0, "unmatched": 0,
                                "bench_unmatched": 0, "overflow": 0}
    for r in results:
        for k, v in r.counts.items():
            total[k] = int(total.get(k, 0)) + v  # type: ignore[arg-type]
    first_div = _first_of(results, "first_divergence")
    first_ovf = _first_of(results, "first_overflow")
    # (no step with a first overflow: where Inf/NaN first comes in, made by a call the dump does not record)
    enters = None if first_ovf else _first_of(results, "nonfinite_enters")
    # (the module the first divergent operator ran in: the summary line names it too)
    chosen = _earliest([r for r in results if r.first_divergence], "first_divergence") if first_div else None
    first_in = chosen.first_divergence_in if chosen else None
    total.update({"graphs": len(results), "first_divergence": first_div, "first_divergence_in": first_in,
                  "first_divergence_warning_only": bool(chosen and chosen.first_divergence_warning_only),
                  "first_divergence_weight": bool(chosen and chosen.first_divergence_weight),
                  "first_overflow": first_ovf, "nonfinite_enters": enters, "output": str(path), "seconds": round(seconds, 3)})
    return total


def _first_of(results: List[RankSummary], kind: str) -> Optional[str]:
    """"step S rank R: node" of the earliest step with one; among its ranks, the one earliest in its rank's
    execution order. A difference that starts on one rank reaches the others through a collective: the first
    rank's own first divergence was that all_reduce, the rank where it began came later in the list."""
    found = [r for r in results if getattr(r, kind)]
    if not found:
        return None
    first = _earliest(found, kind)
    return f"step {first.step} rank {first.rank}: {getattr(first, kind)}"


def _earliest(found: List[RankSummary], kind: str) -> RankSummary:
    # (within a step, a rank's warning-only finding never outranks another rank's error, however early)
    return min(found, key=lambda r: (r.step, bool(getattr(r, f"{kind}_warning_only", False))
                                     or bool(getattr(r, f"{kind}_weight", False)),
                                     _order(getattr(r, f"{kind}_order")), r.rank))


def _order(order: Optional[int]) -> float:
    return float("inf") if order is None else order


def format_summary(result: GraphResult) -> str:
    s = result.summary
    lines = [f"{result.graph_type} graph: {s['graphs']} step x rank graph(s), {s['nodes']} debug nodes"]
    if result.graph_type == "compare":
        lines.append(f"  mode {result.mode}: matched {s['matched']}, pass {s['pass']}, warning {s['warning']}, "
                     f"error {s['error']}, unmatched {s['unmatched']}, bench-only {s.get('bench_unmatched', 0)}")
        inside = f" (in {s['first_divergence_in']})" if s.get("first_divergence_in") else ""
        if s.get("first_divergence_warning_only"):
            # (the reference's tenfold rule warns on tiny amplifications too: a warning alone may be noise)
            inside += " (a warning: no node of that step is an error)"
        elif s.get("first_divergence_weight"):
            # (a weight a few percent off: below every rule's bound, and the only difference that is no rounding)
            inside += " (a weight differs here; no node of that step is an error)"
        lines.append(f"  first divergent node: {s['first_divergence'] or 'none'}{inside}")
    if s.get("overflow") or s.get("first_overflow") or s.get("overflow_check"):   # (-oc: said even with none)
        # (the first overflow is where one starts: finite inputs, an inf/nan output; the other overflow levels are
        # carried in, or the norm-ratio rule: "none" alone beside a count read as a contradiction)
        # (one that a non-finite argument makes, a mask's -inf fill, or that the bench makes identically is skipped)
        bench = " or as the bench does" if result.graph_type == "compare" else ""
        first = s["first_overflow"] or ("none (no node turns finite inputs into inf/nan, other than by an inf/nan "
                                        f"argument{bench})")
        if not s["first_overflow"] and s.get("nonfinite_enters"):
            # (a GradScaler's overflow: the inf is made by a cast the dump does not record, in the backward)
            first += (f"; inf/nan first comes in at {s['nonfinite_enters']} (its inputs: made by a call the dump "
                      "does not record, such as a cast to float16)")
        lines.append(f"  overflow nodes: {s['overflow']}, first overflow: {first}")
    for side, keys in (s.get("left_out") or {}).items():   # type: ignore[union-attr]
        shown = ", ".join(f"step {st} rank {r}" for st, r in keys[:8]) + (f" and {len(keys) - 8} more"
                                                                             if len(keys) > 8 else "")
        lines.append(f"  not compared (the other side has no such folder): {side} {shown}")
    notes = s.get("notes") or []
    for note in notes[:8]:   # type: ignore[index]
        lines.append(f"  warning: {note}")
    if len(notes) > 8:   # type: ignore[arg-type]
        lines.append(f"  warning: and {len(notes) - 8} more like these")   # type: ignore[arg-type]
    lines.append(f"  written: {s['output']} ({s['seconds']} s)")
    return "\n".join(lines)
