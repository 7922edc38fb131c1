"""What the command line prints around the work: a reader that closes the pipe (`| head -1`), and the summary's
warning that proc{pid} folders, which carry no rank, were paired by pid order."""
import os
import shutil
import subprocess
import sys

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden

F = golden.INPUTS


def _closed_stdout(args):
    """Run `python -m tbprobe ARGS` with a stdout whose reader has gone (the read end closed before it writes)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "tbprobe", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(write)
    return proc


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`tbprobe inspect x.vis.db | head -1` printed "tbprobe: error: Broken pipe" and exited 2."""
    out = tmp_path / "o"
    graph = _closed_stdout(["graph", "-q", "-tp", str(F / "npu_stat"), "-gp", str(F / "bench_stat"), "-o", str(out)])
    assert (graph.returncode, graph.stderr) == (141, "")
    db = next(out.glob("compare_*.vis.db"))   # the work was done: only the summary had nowhere to go
    inspect = _closed_stdout(["inspect", str(db)])
    assert (inspect.returncode, inspect.stderr) == (141, "")


def test_proc_folders_paired_by_pid_order_are_named(tmp_path):
    for side in ("d", "b"):
        for pid in ("4711", "815"):
            shutil.copytree(F / "npu_stat" / "step0" / "rank0", tmp_path / side / "step0" / f"proc{pid}")
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    text = result.summary_text()
    assert ("warning: debug: proc{pid} folders (no torch.distributed rank) are paired by pid order (proc815 as "
            "rank 0, proc4711 as rank 1 in step 0)") in text
    assert "warning: bench: proc{pid} folders" in text
    # one proc folder is rank 0 without a doubt: no warning
    alone = run_graph(str(tmp_path / "d" / "step0" / "proc815"), str(tmp_path / "b" / "step0" / "proc815"),
                      str(tmp_path / "o2"), parallel=False, progress=False)
    assert "proc{pid}" not in alone.summary_text()


def test_a_command_started_with_stdout_closed_ends_as_usual(tmp_path):
    """A process started with no stdout at all (`>&-`): the closing flush raised AttributeError on a None stdout,
    a traceback after the work was done."""
    db = next((F / "npu_stat").parent.glob("*.vis.db"), None) or _built_db(tmp_path)
    proc = subprocess.run(["bash", "-c", f'exec "{sys.executable}" -m tbprobe inspect "{db}" >&-'],
                          stderr=subprocess.PIPE, text=True, timeout=300)
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 141), proc.stderr


def test_a_broken_pipe_that_is_not_stdout_is_an_error():
    """Only a stdout whose reader has gone ends quietly: a broken pipe elsewhere (a helper's pipe, a socket) is
    the one-line error any OSError is (it ended with status 141 and no word)."""
    import argparse

    from tbprobe.cli import run

    def fails(args):
        raise BrokenPipeError(32, "Broken pipe")

    parser = argparse.ArgumentParser(prog="tbprobe")
    parser.add_subparsers().add_parser("x").set_defaults(func=fails)
    read, write = os.pipe()   # (stdout a pipe whose reader is still there)
    saved = os.dup(1)
    os.dup2(write, 1)
    try:
        code = run(parser, ["x"])
    finally:
        os.dup2(saved, 1)
        for fd in (saved, read, write):
            os.close(fd)
    assert code == 2


def _built_db(tmp_path):
    result = run_graph(str(F / "npu_stat"), str(F / "bench_stat"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    return result.path
