"""`tbprobe graph` (build / compare .vis.db) and `tbprobe compare` (node-by-node CSV / XLSX table)."""
import argparse
import json
from pathlib import Path
from typing import Optional, Tuple

from tbprobe.errors import FormatError, TbprobeError

__all__ = ["register"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-tp", "--target_path", dest="target_path", help="debug side dump: a rank folder, a step "
                   "folder of ranks, or a folder of steps")
    p.add_argument("-gp", "--golden_path", dest="golden_path", help="bench side dump, same layout")
    p.add_argument("-o", "--output_path", dest="output_path", required=True, help="output folder")
    p.add_argument("-i", "--input_path", dest="input_path",
                   help="older form: compare.json with npu_path, bench_path, is_print_compare_log")
    p.add_argument("-lm", "--layer_mapping", dest="layer_mapping", nargs="?", const="", default=None,
                   help="match layers by mapped names; optional YAML of renames per class")
    p.add_argument("-fm", "--fuzzy_match", dest="fuzzy_match", action="store_true",
                   help="match APIs by name without counters and occurrence within the parent module")
    p.add_argument("--no-align", dest="align", action="store_false",
                   help="turn off the structural aligner (on by default)")
    p.add_argument("--manual-matches", dest="manual", help=".vis.config JSON {debug_node: bench_node}")
    p.add_argument("--serial", action="store_true", help="no worker processes")
    p.add_argument("--strict-dtype", dest="strict_dtype", action="store_true",
                   help="grade every dtype difference an error, as msprobe does (by default two floating-point "
                   "dtypes, bf16 against fp32, are mixed precision: graded by the numbers, with a note)")


def register(subparsers) -> None:
    # (graph_visualize: the reference's name of the command, for scripts that call it so)
    g = subparsers.add_parser("graph", aliases=["graph_visualize"],
                              help="build or compare model graphs into a .vis.db for TensorBoard",
                              description="Build the graph of a dump (-tp) or compare two dumps (-tp, -gp) into "
                              "one build_<ts>.vis.db / compare_<ts>.vis.db.")
    _common(g)
    g.add_argument("-oc", "--overflow_check", dest="overflow_check", action="store_true",
                   help="mark overflow levels (medium / high / critical)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    g.set_defaults(func=_cmd_graph)
    c = subparsers.add_parser("compare", help="write the node-by-node compare table (CSV, or XLSX with --xlsx)")
    _common(c)
    c.add_argument("--xlsx", action="store_true", help="write an .xlsx workbook instead of CSV")
    c.set_defaults(func=_cmd_compare)


def _inputs(args) -> Tuple[str, Optional[str]]:
    if args.input_path:
        path = Path(args.input_path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise FormatError(path, f"cannot read ({exc.strerror})") from None
        except ValueError as exc:
            from tbprobe.formats._io import is_long_int_error, long_int_problem

            raise FormatError(path, f"not valid JSON ({long_int_problem(None) if is_long_int_error(exc) else exc})"
                              ) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("npu_path"), str):
            raise FormatError(path, 'expected {"npu_path": ..., "bench_path": ...}')
        bench = doc.get("bench_path")
        return doc["npu_path"], bench if isinstance(bench, str) and bench else None
    if not args.target_path:
        raise TbprobeError("give the debug dump with -tp (or a compare.json with -i)")
    return args.target_path, args.golden_path


def _layer_map(value: Optional[str]):
    if value is None:
        return None
    if value == "":
        return {}
    path = Path(value)
    try:
        import yaml
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FormatError(path, f"cannot read the layer mapping ({exc.strerror})") from None
    except Exception as exc:  # yaml.YAMLError and its subclasses
        raise FormatError(path, f"not valid YAML ({str(exc).splitlines()[0]})") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise FormatError(path, "a layer mapping must be a mapping of {Class: {bench_name: debug_name}}")
    return doc


def _manual(value: Optional[str]):
    if not value:
        return None
    from tbprobe.formats.vis_config import load_matches
    path = Path(value)
    if not path.is_file():   # (load_matches reads a missing side file as none: asked for by name, it is an error)
        raise FormatError(path, "manual matches file not found")
    return load_matches(path)


def _cmd_graph(args) -> int:
    from tbprobe.graph_builder.run import format_summary, run_graph

    debug, bench = _inputs(args)
    result = run_graph(debug, bench, args.output_path, overflow_check=args.overflow_check,
                       fuzzy=args.fuzzy_match, layer_mapping=_layer_map(args.layer_mapping),
                       parallel=not args.serial, align=args.align, manual=_manual(args.manual),
                       progress=not args.quiet, strict_dtype=args.strict_dtype)
    print(format_summary(result))
    return 0


def _cmd_compare(args) -> int:
    from tbprobe.graph_builder.table import write_table

    debug, bench = _inputs(args)
    if not bench:
        raise TbprobeError("tbprobe compare needs both sides: -tp DEBUG -gp BENCH")
    path, rows = write_table(debug, bench, args.output_path, xlsx=args.xlsx, fuzzy=args.fuzzy_match,
                             layer_mapping=_layer_map(args.layer_mapping), align=args.align,
                             manual=_manual(args.manual), strict_dtype=args.strict_dtype)
    print(f"compare table: {rows} rows written to {path}")
    return 0
