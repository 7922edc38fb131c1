"""``tbprobe monitor ...``: commands on the training monitor's output."""
import argparse
import os

from tbprobe.monitor.csv_export import export_logdir

__all__ = ["register"]


def register(subparsers) -> None:
    monitor = subparsers.add_parser("monitor", help="training monitor output (TrainerMon)")
    sub = monitor.add_subparsers(dest="monitor_command", metavar="ACTION")
    exp = sub.add_parser(
        "export-csv",
        help="write the monitor's scalars as CSV files in the reference monitor's layout",
        description="Export every tbprobe monitor run under LOGDIR (one folder per rank) to CSV files with the "
        "reference monitor's columns: vpp_stage,name,step[,micro_step],<ops>,shape,dtype.",
    )
    exp.add_argument("logdir", metavar="LOGDIR", help="the monitor output folder (or any folder above it)")
    exp.add_argument("-o", "--out", default=None, help="where to write (default: LOGDIR/csv_export)")
    exp.set_defaults(func=_export_csv)
    monitor.set_defaults(func=lambda args: (monitor.print_help(), 0)[1])


def _export_csv(args: argparse.Namespace) -> int:
    out = args.out or os.path.join(args.logdir, "csv_export")
    written = export_logdir(args.logdir, out)
    print(f"wrote {len(written)} CSV files under {out}")
    return 0
