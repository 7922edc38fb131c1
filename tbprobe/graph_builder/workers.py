"""Child processes that stay quiet on signals: the forked row helper, the tensor workers and the rank workers.

A forked child inherits the parent's signal handlers: tbprobe's SIGTERM handler raised in the helper too, which
printed `Process ForkPoolWorker-1: Traceback ... tbprobe.cli._Terminated` before the parent's one line; Ctrl-C
raised KeyboardInterrupt in every child, with the same traceback (or a stray `Process ...:` line when the
parent's pool killed it half way). In a child, SIGINT is ignored (the parent, in the same process group, gets it
too and tears the pool down) and SIGTERM and SIGHUP kill it outright, without a word (the parent's cleanup sends
SIGTERM to each child before it removes the temporary files); on Linux a child also gets SIGTERM when its parent
dies, so none outlives a parent that was killed outright."""
import contextlib
import functools
import os
import signal
from typing import Callable, Iterator, Optional

__all__ = ["quiet_child", "child_initializer", "worker_pool", "ForkedHelper", "STOPPED_WHY"]

STOPPED_WHY = "killed by a signal, or by the system when memory ran out"
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def _die_with_parent(parent: int) -> None:
    # (PR_SET_PDEATHSIG fires when the thread that forked the child ends, not its process: every fork here is
    # made by the thread that runs the command, which lives as long as the process)
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:   # (the parent died before the line above)
        os._exit(1)


def quiet_child(parent: Optional[int] = None) -> None:
    """In a child process: SIGINT ignored, SIGTERM and SIGHUP back to their default (a silent exit) unless the
    parent ignores them too (`nohup`: a hangup must not kill the helper the parent waits for); with `parent`,
    SIGTERM when that process dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
    if parent is not None:
        _die_with_parent(parent)
    with contextlib.suppress(AttributeError, ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)   # (ForkedHelper forks with them blocked)


def _init(parent: int, then: Optional[Callable[[], None]]) -> None:
    quiet_child(parent)
    if then is not None:
        then()


def child_initializer(then: Optional[Callable[[], None]] = None) -> Callable[[], None]:
    """A pool initializer that makes each worker a quiet child of this process, then runs `then`."""
    return functools.partial(_init, os.getpid(), then)


@contextlib.contextmanager
def worker_pool(max_workers: int, initializer: Optional[Callable[[], None]] = None) -> Iterator:
    """A ProcessPoolExecutor of quiet workers. Left by an exception (a signal included), its workers are killed
    and the jobs not started are dropped: the executor's own exit waited for every job queued (a whole tensor
    compare after Ctrl-C)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from tbprobe.errors import TbprobeError

    pool = ProcessPoolExecutor(max_workers=max_workers, initializer=child_initializer(initializer))
    # (a fork-started pool forks all its workers at its first submit: made here, with the signals held back as
    # ForkedHelper holds them, so that none reaches a worker before its initializer has made it quiet)
    with _signals_blocked():
        pool.submit(int)
    try:
        try:
            yield pool
        except BrokenProcessPool:   # (a traceback before)
            raise TbprobeError(f"a worker process stopped before it finished ({STOPPED_WHY})") from None
    except BaseException:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            with contextlib.suppress(Exception):
                process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back while a child is forked: the child starts with them blocked (it sets
    its own handlers first, then lets them in), so none reaches it running the parent's handlers; the parent
    gets a signal that came meanwhile when the block ends."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    except (AttributeError, ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _helper_main(conn, parent: int, fn: Callable, args: tuple) -> None:
    quiet_child(parent)
    try:
        answer = (True, fn(*args))
    except BaseException as exc:   # back to the parent, which raises it (nothing is printed here)
        answer = (False, exc)
    try:
        conn.send(answer)
    except Exception:   # an exception that does not pickle; or the parent is gone
        with contextlib.suppress(Exception):
            conn.send((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))
    with contextlib.suppress(Exception):
        conn.close()


class ForkedHelper:
    """fn(*args) in one forked child (it inherits everything, nothing is pickled on the way in); `result()`
    waits for its answer, `stop()` ends it. A plain process and a pipe rather than a one-worker Pool: a Pool
    whose worker died replaced it and waited for the lost job's answer for ever, and its terminate() then hung
    on the queue lock the new worker held.

        helper = ForkedHelper(fn, a, b)
        try:
            helper.start()
            ...
            value = helper.result()
        finally:
            helper.stop()   # (kills it if still running: before its temporary files are removed)
    """

    def __init__(self, fn: Callable, *args, what: str = "the row helper process"):
        import multiprocessing

        self.what = what
        ctx = multiprocessing.get_context("fork")
        self._recv, self._send = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_helper_main, args=(self._send, os.getpid(), fn, args), daemon=True)
        self._answered = False

    def start(self) -> None:
        with _signals_blocked():
            self._process.start()
        self._send.close()

    def _started(self) -> bool:
        return getattr(self._process, "_popen", None) is not None

    def result(self):
        """The child's return value (its exception raised here); an error if it dies before it answers (SIGKILL,
        the OOM killer, a signal sent to it alone) instead of a wait for ever."""
        from tbprobe.errors import TbprobeError

        while True:
            if self._recv.poll(0.2):
                try:
                    ok, value = self._recv.recv()
                except EOFError:
                    self._process.join(5)
                    break
                self._answered = True
                if ok:
                    return value
                raise value
            if self._process.exitcode is not None and not self._recv.poll(0):
                break
        code = self._process.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        raise TbprobeError(f"{self.what} stopped before it finished ({how}: {STOPPED_WHY})")

    def stop(self) -> None:
        """Kill the child if it still runs, wait for it, close the pipe."""
        if self._started():
            if self._answered:
                self._process.join(2)   # (it exits by itself once it has answered)
            if self._process.exitcode is None:
                with contextlib.suppress(OSError):
                    self._process.kill()
            self._process.join()
        for conn in (self._recv, self._send):
            with contextlib.suppress(OSError):
                conn.close()
