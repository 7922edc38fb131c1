"""Writes finished steps to disk: on a background thread with a bounded queue (async_dump), or at once in the
caller's step() (the reference's default). Framework-neutral.

Layout (the reference's): dump_path/step{N}/rank{R}|proc{pid}/{dump,construct,stack}.json, plus
dataflow.json (tbprobe's own side file) and dump_tensor_data/ for tensors; at level debug, debug.json alone in
dump.json's place. dump.json is written last, to a temporary name and renamed: a rank folder counts as a step
only once its dump.json is there (tbprobe's and the reference's readers both look for it), so a killed process
never leaves a half step that looks whole. The side
files before it are written in place (a temporary name and a rename would be two more file-system calls each), or
made hard links to the last step's when their text is the same (a new file costs far more than a link), and a
step's folders and files are all made in one call that gives up the GIL once (_cwrite.c says why). A full disk
(or any OS error) stops collection with one message; training goes on.
"""
import errno
import json
import logging
import os
import queue
import shutil
import sqlite3
import threading
from typing import Any, Callable, Dict, List, Optional

try:
    import orjson as _orjson
except ImportError:  # a dependency of tbprobe; the json module does the same work more slowly
    _orjson = None
try:
    from tbprobe.collector._cjson import dumps_nonfinite as _dumps_nonfinite
except ImportError:   # (the extension not built: the json module writes every tree holding a NaN or Inf)
    _dumps_nonfinite = None

from tbprobe.collector.recorder import Spilled, StackInterner, StepRecord, fill_items
from tbprobe.errors import TbprobeError

__all__ = ["StepWriter", "check_writable", "disk_full", "json_bytes", "write_files"]

# what _cjson puts in place of a NaN, Infinity and -Infinity float while orjson encodes
_FRAGMENTS = (tuple(_orjson.Fragment(t) for t in (b"NaN", b"Infinity", b"-Infinity"))
              if _orjson is not None and hasattr(_orjson, "Fragment") else None)

log = logging.getLogger("tbprobe.collector")


def json_bytes(obj: Any, indent: Optional[int] = 1, finite: bool = False) -> bytes:
    """Compact JSON (indent None) by orjson, about 10x faster than the json module's C encoder (the writer
    thread's CPU counts against the training process). orjson writes a NaN as null: `finite` says the caller knows
    `obj` holds no NaN/Inf float; otherwise _cjson swaps them for NaN/Infinity fragments during the call. Anything
    orjson refuses (integers beyond 64 bits, non-string keys, a tree _cjson cannot vouch for) and indented text
    take the json module, which writes NaN/Infinity as the reference does."""
    if indent is None and _orjson is not None:
        try:
            if finite:
                return _orjson.dumps(obj)
            if _dumps_nonfinite is not None and _FRAGMENTS is not None:
                # NaN/Infinity written as the reference writes them, at orjson's speed (_cjson.c); None when the
                # tree holds what that cannot vouch for
                text = _dumps_nonfinite(obj, _orjson.dumps, *_FRAGMENTS)
                if text is not None:
                    return text
        except TypeError:
            pass
    # json.dumps, not json.dump: dump() always takes the pure-Python encoder, dumps() the C one when indent is
    # None. Records are trees built by tbprobe, never cyclic: without the cycle check the C encoder takes ~40%
    # less time.
    return json.dumps(obj, indent=indent, allow_nan=True, check_circular=False).encode("utf-8")


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _write_files_py(dirs: tuple, files: list) -> list:
    """What _cwrite.write_files does, in Python (when the extension is not built); see its top comment."""
    for d in dirs:
        try:
            os.mkdir(d)
        except FileExistsError:
            pass
    out = []
    for path, data, tmp, *same in files:
        if same and _link_same(same[0], path):
            out.append(tuple(same[0][1:]))
            continue
        try:
            if tmp is None:
                out.append(_write_fresh(path, data))
            else:
                with open(tmp, "wb") as f:
                    out.append(_write_to(f, data))
                os.rename(tmp, path)
        except OSError as exc:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                if exc.filename == tmp and exc.filename2 == path:   # the rename failed: it is about `path`
                    raise OSError(exc.errno, exc.strerror, path) from None
            raise
    return out


def _write_fresh(path: str, data: bytes) -> tuple:
    """A new file at `path`: an old one there is unlinked, never written through (it may be a link to another
    step's file); the unlink is tried only when the file is there, which it is not as a rule."""
    try:
        f = open(path, "xb")
    except FileExistsError:
        os.unlink(path)
        f = open(path, "xb")
    with f:
        return _write_to(f, data)


def _write_to(f, data: bytes) -> tuple:
    f.write(data)
    f.flush()
    return _identity(os.fstat(f.fileno()))


def _link_same(same: tuple, path: str) -> bool:
    src, *want = same
    try:
        if _identity(os.stat(src)) != tuple(want):
            return False
        try:
            os.link(src, path)
        except FileExistsError:
            os.unlink(path)
            os.link(src, path)
    except OSError:
        return False
    return True


try:
    from tbprobe.collector._cwrite import write_files
except ImportError:
    write_files = _write_files_py


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk is full (an OSError's ENOSPC, or SQLite's own words for it)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)


def check_writable(dump_path: str, what: str = "dump_path") -> None:
    """Raise a clear TbprobeError when dump_path (the setting `what`) cannot be created or written."""
    try:
        os.makedirs(dump_path, exist_ok=True)
        probe = os.path.join(dump_path, f".tbprobe-write-test-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.unlink(probe)
    except OSError as exc:
        raise TbprobeError(f"{what} {dump_path}: not writable ({exc.strerror or exc})") from None


class StepWriter:
    """One background thread (or none, see `background`); `submit` hands over a finished step, `close` drains the
    queue."""

    def __init__(self, dump_path: str, task: str, level: str, framework: str, extra_info: bool,
                 stacks: StackInterner, save_tensor: Optional[Callable[[str, Any], None]] = None,
                 on_step_written: Optional[Callable[[str, int, Dict[str, float], bool], None]] = None,
                 max_queue: int = 2, background: bool = True,
                 on_disk_full: Optional[Callable[[], None]] = None) -> None:
        self.dump_path = dump_path
        self.on_disk_full = on_disk_full   # (the dump failed on a full disk: the side outputs give their room)
        self.task = task
        self.level = level
        self.framework = framework
        self.extra_info = extra_info
        self.stacks = stacks
        self.save_tensor = save_tensor
        self.file_errors = 0     # tensor files that could not be written (and were left out)
        self.on_step_written = on_step_written
        self.failed: Optional[str] = None      # set once a write failed: collection stops
        # file name -> (text, path, identity) of the last step's side file of that name: its link source
        self._last_side: Dict[str, tuple] = {}
        self._last_obj: Dict[str, tuple] = {}    # file name -> (the last step's dict, its JSON text)
        self._stack_json: Dict[int, str] = {}   # interned stack id -> its lines as JSON text
        self._q: "queue.Queue" = queue.Queue(maxsize=max_queue)
        # `background` false (async_dump false, the reference's default: a step's files are on disk when step()
        # returns): the caller would only wait for the thread, so it writes itself and spares two thread hand-offs
        # a step
        self._thread: Optional[threading.Thread] = None
        if background:
            self._thread = threading.Thread(target=self._run, name="tbprobe-writer", daemon=True)
            self._thread.start()

    def submit(self, record: StepRecord, values: List, rank_dir: str) -> None:
        if self.failed:
            return
        if self._thread is None:
            self._write_guarded((record, values, rank_dir))
            return
        self._q.put((record, values, rank_dir))   # blocks when the writer is 2 steps behind: bounded memory

    def flush(self) -> None:
        self._q.join()

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._q.put(None)
            self._thread.join()

    def _run(self) -> None:
        while True:
            job = self._q.get()
            try:
                if job is None:
                    return
                self._write_guarded(job)
            finally:
                self._q.task_done()

    def _write_guarded(self, job: tuple) -> None:
        if self.failed:
            return
        try:
            self._write(*job)
        except OSError as exc:
            why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
            self.failed = f"cannot write the dump ({why}): collection stopped, training continues"
            log.error("tbprobe: %s", self.failed)
            if exc.errno == errno.ENOSPC and self.on_disk_full is not None:
                try:
                    self.on_disk_full()
                except Exception as cb_exc:   # (the writer's own failure is the message that counts)
                    log.error("tbprobe: freeing the live graph's room failed (%s)", cb_exc)
        except Exception as exc:  # never let the writer die silently
            self.failed = f"writer error ({type(exc).__name__}: {exc}): collection stopped"
            log.error("tbprobe: %s", self.failed)

    def _write(self, record: StepRecord, values: List, rank_dir: str) -> None:
        health = fill_items(record, values)
        for item, text in record.checksums:
            item["md5"] = text
        step_dir = os.path.join(self.dump_path, f"step{record.step}")
        out = os.path.join(step_dir, rank_dir)
        try:
            self._write_step(record, out, step_dir)
        except OSError:
            # the step's folder half written (a disk full midway): taken away, which also gives the room back
            shutil.rmtree(out, ignore_errors=True)
            try:
                os.rmdir(step_dir)    # (only when no other rank's folder is in it)
            except OSError:
                pass
            raise
        if self.on_step_written is not None:
            # only for the newest finished step: when the writer is behind, older steps skip the extras
            self.on_step_written(out, record.step, health, not self._steps_pending())

    def _write_step(self, record: StepRecord, out: str, step_dir: str) -> None:
        """The step's files: its tensor files, side files and dump.json (debug.json) last."""
        dirs = (step_dir, out)
        data_dir = None
        if record.tensor_files and self.save_tensor is not None:
            data_dir = os.path.join(out, "dump_tensor_data")
            self._write_files(dirs + (data_dir,), [])
            dirs = ()
            for fname, payload, item in record.tensor_files:
                if isinstance(payload, Spilled):
                    # written while the step ran (Session.HOLD_BYTES): moved into place, on the same file system
                    # as a rule (the staging folder is beside the dump)
                    shutil.move(payload.path, os.path.join(data_dir, fname))
                    continue
                try:
                    self.save_tensor(os.path.join(data_dir, fname), payload)
                except OSError:
                    raise
                except Exception as exc:   # this one file is lost, not the step: its item names no file
                    item.pop("data_name", None)
                    self.file_errors += 1
                    if self.file_errors == 1:
                        log.warning("tbprobe: tensor file %s not written (%s: %s); the step's other files are "
                                    "written, and its record names no file", fname, type(exc).__name__, exc)
        # level debug: the saved values in debug.json, alone (no construct, no stacks), as the reference writes them
        side = [] if self.level == "debug" else self._side_texts(record)
        files = [self._side_file(out, fname, text) for fname, text in side]
        main = "debug.json" if self.level == "debug" else "dump.json"
        files.append(self._dump_file(os.path.join(out, main), data_dir, record.entries, not record.nonfinite))
        identities = self._write_files(dirs, files)
        for (fname, text), (path, *_), ident in zip(side, files, identities):
            self._last_side[fname] = (text, path, ident)

    def _side_texts(self, record: StepRecord) -> List[tuple]:
        """The step's side files as (file name, text): stack.json, construct.json and, when there is data flow,
        dataflow.json."""
        side = []
        if self.extra_info:   # (false: no stack.json nor construct.json, as the reference writes none)
            groups: Dict[int, List[str]] = {}
            for name, sid in record.stack_of.items():
                groups.setdefault(sid, []).append(name)
            stack_text = self._side_text("stack.json", groups, self._stack_text)
            construct: Dict[str, Optional[str]] = {} if self.level == "L1" else record.construct
            # indent=None: the C encoder (the indenting one is pure Python and dominated the writer's time)
            side = [("stack.json", stack_text), ("construct.json", self._side_text("construct.json", construct))]
        if record.dataflow:
            side.append(("dataflow.json", self._side_text("dataflow.json", record.dataflow)))
        return side

    def _side_text(self, fname: str, obj: dict, encode: Optional[Callable[[Any], bytes]] = None) -> bytes:
        """A side file's text, `encode(obj)` (compact JSON by default); the last step's text again when `obj`
        equals the last step's (the usual case: comparing the dicts costs about a tenth of encoding one)."""
        last = self._last_obj.get(fname)
        if last is not None and last[0] == obj:
            return last[1]
        text = json_bytes(obj, indent=None, finite=True) if encode is None else encode(obj)
        self._last_obj[fname] = (obj, text)
        return text

    def _side_file(self, out: str, fname: str, text: bytes) -> tuple:
        """A side file for write_files: a link to the last step's file when the text is the same (the usual case:
        _cwrite.c says why)."""
        path = os.path.join(out, fname)
        last = self._last_side.get(fname)
        if last is not None and last[0] == text:   # (bytes equality tests identity first)
            return path, text, None, (last[1],) + tuple(last[2])
        return path, text, None

    def _write_files(self, dirs: tuple, files: list) -> list:
        """The step's side files are written in place (or linked) and dump.json last, renamed from a temporary
        name (see the top of this file); all in one call that gives up the GIL once. Returns the files'
        identities (write_files)."""
        try:
            return write_files(dirs, files)
        except FileNotFoundError:
            if not dirs:
                raise
            os.makedirs(dirs[-1], exist_ok=True)   # dump_path itself was removed: make it again, once
            return write_files(dirs, files)

    def _stack_text(self, groups: Dict[int, List[str]]) -> bytes:
        """stack.json as {"<i>": [names, lines]}; each interned stack's lines are JSON-encoded once per process
        (the same stacks come back every step) and only the name lists per step (a step whose names and stacks
        are the last step's reuses its text: _side_text)."""
        cache = self._stack_json
        parts = []
        for i, (sid, names) in enumerate(groups.items()):
            lines = cache.get(sid)
            if lines is None:
                lines = cache[sid] = json.dumps(self.stacks.lines[sid])
            parts.append(f'"{i}": [{json.dumps(names, check_circular=False)}, {lines}]')
        return ("{" + ", ".join(parts) + "}").encode("utf-8")

    def _steps_pending(self) -> bool:
        if self._thread is None:
            return False
        with self._q.mutex:
            return any(job is not None for job in self._q.queue)

    def _dump_file(self, path: str, data_dir: Optional[str], entries: Dict[str, dict], finite: bool) -> tuple:
        """dump.json last: its presence marks a complete step. Compact JSON (the C encoder) and no fsync: a
        killed process loses nothing that was renamed into place, and an fsync per step costs more kernel time
        than a small training step here."""
        # a structure dump has names only (construct.json, stack.json), as the reference's: msprobe's graph compare
        # takes records in dump.json for statistics to compare, refuses the mode, and hangs
        dump = {"task": self.task, "level": self.level, "framework": self.framework,
                "dump_data_dir": data_dir, "data": {} if self.task == "structure" else entries}
        return path, json_bytes(dump, indent=None, finite=finite), f"{path}.tmp-{os.getpid()}"
