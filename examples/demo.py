"""The README demo: train a small model twice (a perturbed "debug" run and a clean "bench" run) with the
collector and the training monitor on, then build the compare graph of the two runs.

    python examples/demo.py --out demo_out       (then: tensorboard --logdir demo_out)
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(cmd: list) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="demo_out", help="output folder (the TensorBoard log directory)")
    parser.add_argument("--steps", type=int, default=3, help="training steps per run")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    started = time.monotonic()

    runs = {"debug": ["--perturb", "0.05"], "bench": []}
    for name, extra in runs.items():
        _run([
            sys.executable, os.path.join(HERE, "train_gpt.py"),
            "--dump-path", os.path.join(out, "dumps", name),
            "--level", "mix",
            "--steps", str(args.steps),
            "--monitor-dir", os.path.join(out, "monitor", name),
            *extra,
        ])

    from tbprobe.graph_builder import run_graph

    result = run_graph(
        os.path.join(out, "dumps", "debug"),
        os.path.join(out, "dumps", "bench"),
        os.path.join(out, "compare"),
        overflow_check=True,
    )
    print(result.summary_text() if hasattr(result, "summary_text") else result)
    print(f"demo ready in {time.monotonic() - started:.0f} s: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
