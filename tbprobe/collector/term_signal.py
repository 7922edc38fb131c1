"""SIGTERM: the step a process is in when its launcher ends it is written before the process goes.

When one rank of a job fails, `torch.multiprocessing.spawn` and torchrun end the other ranks with SIGTERM. Its
default action ends a process at once, without atexit, so the step those ranks were in (the one the user is
debugging: where the failing rank diverged) was lost on every rank but the failing one. Where SIGTERM still has its
default action, tbprobe handles it: the open steps are written, then the default action is restored and the signal
sent again, so the process ends as it would have (killed by SIGTERM, same status).

What the handler must never do is keep a process alive that its launcher ended:
- Python runs a handler in the main thread between bytecodes; a main thread blocked in C (a collective waiting for a
  dead peer, whose wait ignores signals: the usual state of the ranks a launcher ends after one failed) would never
  get there. A watchdog thread hears the signal at once (the signal module's wakeup fd) and, if the handler has not
  begun within WATCHDOG_S seconds, writes the open steps itself, from its own thread, for at most WRITE_S seconds,
  then ends the process with SIGTERM's default action. The main thread is parked in C meanwhile, so the records are
  still; should it come back into Python, the pending handler ends the process at once (every file is written
  under a temporary name and renamed, so none is left half-written).
- A second SIGTERM (or a SIGINT) while the step is written ends the process at once; other Python-level handlers
  (a DataLoader's SIGCHLD one, which raises when its workers die of the same process-group SIGTERM) are held off.
- A forked child (a DataLoader worker) inherits the handler and the wakeup fd: it gets SIGTERM's default action
  back, and the pipe is closed in it, so its signals never reach the parent's watchdog.
A handler the user installs (before or after start()) wins: none is installed over one, and close() restores the
default only where the handler is still tbprobe's. Framework-neutral.
"""
import ctypes
import logging
import os
import signal
import threading
import weakref
from typing import Callable, Optional

__all__ = ["on_terminate", "WATCHDOG_S", "WRITE_S"]

log = logging.getLogger("tbprobe.collector")

WATCHDOG_S = 5.0   # how long a main thread blocked in C may keep the process from ending
# how long the watchdog then spends writing the open steps: with WATCHDOG_S under the 30 s torchrun and most
# schedulers leave between SIGTERM and SIGKILL
WRITE_S = 20.0

_lock = threading.Lock()
_claim_lock = threading.RLock()   # who writes the open steps: the main thread's handler or the watchdog, never both
_callbacks: "weakref.WeakKeyDictionary[object, Callable[[], None]]" = weakref.WeakKeyDictionary()
_state = {"pid": None, "pipe": None, "began": None}


def on_terminate(owner: object, callback: Callable[[], None]) -> Callable[[], None]:
    """Run `callback()` when SIGTERM comes, then end the process as SIGTERM would; for as long as `owner` lives
    (weakly held) or until the returned function is called. Nothing is installed outside the main thread, or where
    SIGTERM has a handler other than the default (or tbprobe's)."""
    with _lock:
        if not _install():
            return lambda: None
        _callbacks[owner] = callback

    def remove() -> None:
        with _lock:
            _callbacks.pop(owner, None)
            if not _callbacks:
                _uninstall()

    return remove


def _install() -> bool:
    if _state["pid"] == os.getpid():
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False
        signal.signal(signal.SIGTERM, _handle)
    except (ValueError, OSError):   # (an interpreter without signals in this thread)
        return False
    _state.update(pid=os.getpid(), pipe=None, began=threading.Event())
    _start_watchdog()
    return True


def _start_watchdog() -> None:
    """The wakeup fd, where the interpreter's C handler writes each signal's number as it comes; skipped where
    something else (asyncio) uses it: the handler still runs, without the watchdog."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        old = None
    if old != -1:
        if old is not None:
            signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
        return
    _state["pipe"] = (r, w)
    threading.Thread(target=_watch, args=(r, _state["began"]), name="tbprobe-sigterm", daemon=True).start()


def _uninstall() -> None:
    if _state["pid"] != os.getpid():
        return
    try:
        _restore()
    except (ValueError, OSError):   # (close() from another thread: the handler stays, with nothing to write)
        return
    _close_pipe()
    _state["pid"] = None


def _restore() -> None:
    """SIGTERM's default action and no wakeup fd, each only where it is still tbprobe's (asyncio, started since,
    sets a wakeup fd of its own)."""
    if signal.getsignal(signal.SIGTERM) is _handle:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _drop_wakeup_fd()


def _drop_wakeup_fd() -> None:
    if _state["pipe"] is not None:
        old = signal.set_wakeup_fd(-1)
        if old != _state["pipe"][1]:
            signal.set_wakeup_fd(old)


def _close_pipe(in_child: bool = False) -> None:
    """The pipe's write end closed, after a 0 (no signal's number) that stops the watchdog, which closes the read
    end (a read blocked on a pipe ends at EOF only once every copy of the write end is closed: a forked child
    holds one until its hook closes it). In a forked child, where no watchdog runs, both ends are closed and nothing written: the parent's would read it."""
    pipe, _state["pipe"] = _state["pipe"], None
    if pipe is None:
        return
    r, w = pipe
    if not in_child:
        try:
            os.write(w, b"\0")
        except OSError:
            pass
    for fd in (r, w) if in_child else (w,):
        try:
            os.close(fd)
        except OSError:
            pass


def _watch(r: int, began: threading.Event) -> None:
    try:
        _wait_for_sigterm(r, began)
    finally:
        os.close(r)


def _wait_for_sigterm(r: int, began: threading.Event) -> None:
    while True:
        try:
            data = os.read(r, 64)
        except OSError:
            return
        if not data or 0 in data:   # (the pipe closed, or told to stop: _close_pipe)
            return
        if signal.SIGTERM in data:
            if signal.getsignal(signal.SIGTERM) is not _handle:
                continue   # (the user's handler, installed since: it decides, the watchdog never ends the process)
            if not began.wait(WATCHDOG_S) and _claim(began):
                log.warning("tbprobe: SIGTERM came while the main thread was blocked outside Python for %.0f s: "
                            "its open step is written from another thread (at most %.0f s), then the process ends",
                            WATCHDOG_S, WRITE_S)
                writer = threading.Thread(target=_run_callbacks, name="tbprobe-sigterm-write", daemon=True)
                writer.start()
                writer.join(WRITE_S)
                if writer.is_alive():
                    log.warning("tbprobe: the open step was not written within %.0f s: the process ends without it",
                                WRITE_S)
                _die()
            return


def _claim(began: threading.Event) -> bool:
    """Whether the caller is the one to write the open steps (the first to ask)."""
    with _claim_lock:
        if began.is_set():
            return False
        began.set()
        return True


def _run_callbacks() -> None:
    for callback in list(_callbacks.values()):
        try:
            callback()
        except BaseException as exc:   # (never a traceback from a signal handler: the process ends next)
            log.warning("tbprobe: writing the open step at SIGTERM failed: %s", exc)


def _handle(signum, frame) -> None:
    began = _state["began"]
    if _state["pid"] != os.getpid() or began is None or began.is_set():
        _die()   # (a forked child that kept the handler; or a second SIGTERM while the first is handled)
    # the wakeup fd dropped before the watchdog is told (it then closes the pipe's read end): each later signal (a
    # DataLoader worker's SIGCHLD) was written into the closed pipe, an EPIPE traceback on stderr
    try:
        _drop_wakeup_fd()
    except (ValueError, OSError):
        pass
    if not _claim(began):
        _die()   # (back from C while the watchdog writes the open steps)
    try:
        _hold_other_handlers()
        _run_callbacks()
    finally:
        _die()


def _hold_other_handlers() -> None:
    """While the open step is written, the process's other Python-level signal handlers are held off (it ends right
    after): a DataLoader's SIGCHLD handler raised into the write ("worker ... is killed by signal") when a
    process-group SIGTERM (scancel, kill -TERM -pgid) ended its workers too, and the step was lost. SIGINT (Ctrl-C
    while it writes) ends the process at once, as a second SIGTERM does."""
    for signum in signal.valid_signals():
        if signum == signal.SIGTERM:
            continue
        try:
            if callable(signal.getsignal(signum)):   # (not SIG_DFL or SIG_IGN, nor one set outside Python)
                signal.signal(signum, _end_now if signum == signal.SIGINT else _ignore)
        except (ValueError, OSError, RuntimeError):
            pass


def _ignore(signum, frame) -> None:
    pass


def _end_now(signum, frame) -> None:
    _die()


def _die() -> None:
    """SIGTERM's default action, from any thread: the C library's signal() resets it (the signal module's
    signal() works in the main thread alone), then the signal comes again."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(int(signal.SIGTERM), None)   # (SIG_DFL is 0)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        os._exit(128 + int(signal.SIGTERM))   # (only if the signal did not end it)


def _after_fork_in_child() -> None:
    if _state["pid"] is None:
        return
    _state["pid"] = None
    try:
        _restore()
    except (ValueError, OSError):
        pass
    _close_pipe(in_child=True)
    _callbacks.clear()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})   # (one held since the fork ends the child now)


def _before_fork() -> None:
    # SIGTERM blocked across the fork: one that reaches the child before its hook below gave it the default action
    # is held until then (it was taken by tbprobe's handler, then dropped, and the child lived on); and no wakeup
    # fd across it: such a child wrote into the parent's pipe, and the parent's watchdog ended the parent
    if _state["pid"] != os.getpid():
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        _drop_wakeup_fd()
    except (ValueError, OSError):   # (a fork from another thread)
        pass


def _after_fork_in_parent() -> None:
    if _state["pid"] != os.getpid():
        return
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if _state["pipe"] is not None:
        w = _state["pipe"][1]
        try:
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            if old not in (-1, w):
                signal.set_wakeup_fd(old)   # (not ours: left as it was)
        except (ValueError, OSError):
            pass


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


def installed() -> Optional[int]:
    """The pid whose SIGTERM tbprobe handles now (tests)."""
    return _state["pid"]
