"""PrecisionDebugger: the collector's public class for PyTorch (drop-in for msprobe's)."""
import atexit
import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import shutil
import weakref
from typing import Any, Callable, ContextManager, Iterator, List, Optional, Sequence, Union

import torch

from tbprobe.collector.config import CollectorConfig, load_config
from tbprobe.collector.filters import StepFilter
from tbprobe.collector.guard import HookGuard
from tbprobe.collector.live_graph import side_dir
from tbprobe.collector.pytorch import instances
from tbprobe.collector.pytorch.api_mode import ApiCapture
from tbprobe.collector.pytorch.custom_api import CustomApis
from tbprobe.collector.pytorch.debug_save import DebugSaver
from tbprobe.collector.pytorch.distributed import DistributedCapture
from tbprobe.collector.pytorch.dynamo_skip import keep_own_frames_eager
from tbprobe.collector.pytorch.module_dump import ModuleDumper
from tbprobe.collector.pytorch.module_dump import check_args as check_module_dump_args
from tbprobe.collector.pytorch.module_hooks import ModuleHooks, model_problem
from tbprobe.collector.pytorch.session import Session
from tbprobe.collector.pytorch.tensor_files import save_tensor
from tbprobe.collector.pytorch.token_range import TokenWindow, check_token_range
from tbprobe.collector.pytorch.token_range import check_root as check_token_root
from tbprobe.collector.recorder import StackInterner
from tbprobe.collector.step_outputs import StepOutputs
from tbprobe.collector.term_signal import on_terminate
from tbprobe.collector.writer import StepWriter, check_writable
from tbprobe.errors import TbprobeError

__all__ = ["PrecisionDebugger"]

log = logging.getLogger("tbprobe.collector")


def _uncompiled(model: Any) -> Any:
    """The model under torch.compile's wrapper (an OptimizedModule holds it as `_orig_mod`): its modules are named
    as the eager model's, with no `_orig_mod.` in every name and no record of the wrapped model itself."""
    if isinstance(model, (list, tuple)):
        return type(model)(_uncompiled(m) for m in model)
    orig = getattr(model, "_orig_mod", None)
    if isinstance(orig, torch.nn.Module) and type(model).__name__ == "OptimizedModule":
        return orig
    return model


def _part_of(module: torch.nn.Module, model: Any) -> bool:
    """Whether `module` is `model`, or one of its modules (of one of them, for a list of model chunks)."""
    models = model if isinstance(model, (list, tuple)) else [model]
    return any(m is module or any(sub is module for sub in m.modules()) for m in models
               if isinstance(m, torch.nn.Module))


def _rank() -> Optional[int]:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    return None


def _differences(used: CollectorConfig, asked: CollectorConfig, most: int = 4) -> str:
    """The settings `asked` would change of `used`, as "level 'mix' (open: 'L0')": the warning names them."""
    diffs = [f"{f.name} {getattr(asked, f.name)!r} (open: {getattr(used, f.name)!r})"
             for f in dataclasses.fields(used) if getattr(used, f.name) != getattr(asked, f.name)]
    return ", ".join(diffs[:most]) + (f" and {len(diffs) - most} more" if len(diffs) > most else "")


class PrecisionDebugger:
    """Records statistics of modules (L0), operators (L1) or both (mix) for the steps asked for.

    ``PrecisionDebugger(config_path=None, task=None, dump_path=None, level=None, step=None)``; every
    configuration problem is raised here as TbprobeError, never during training.

    As the reference's debugger is one per process, constructing one again with the dump_path of a debugger that
    is still open (not closed, not past its last step) gives that debugger back: two would hook the model twice
    and write the same step folders. Debuggers with other dump paths are independent.
    """

    def __new__(cls, config_path: Optional[str] = None, task: Optional[str] = None,
                dump_path: Optional[str] = None, level: Optional[str] = None,
                step: Optional[List[int]] = None, *args: Any, **kwargs: Any) -> "PrecisionDebugger":
        cfg = load_config(config_path, task=task, dump_path=dump_path, level=level, step=step)
        existing = instances.open_for(cfg.dump_path)
        if existing is not None:
            if existing.config != cfg:
                log.warning("tbprobe: a PrecisionDebugger writing to %s is open already: it is used, and this one's "
                            "differing settings are not (%s; close() it first to start another)", cfg.dump_path,
                            _differences(existing.config, cfg))
            return existing
        obj = super().__new__(cls)
        obj._preloaded = cfg
        return obj

    def __init__(self, config_path: Optional[str] = None, task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None,
                 step: Optional[List[int]] = None, model: Optional[torch.nn.Module] = None,
                 live_graph: bool = True, live_graph_interval: float = 2.0) -> None:
        if "_preloaded" not in self.__dict__:
            return        # the open debugger of this dump_path, given back by __new__
        self.config: CollectorConfig = self.__dict__.pop("_preloaded")
        cfg = self.config
        self.guard = HookGuard()
        self.stacks = StackInterner()
        self.session = Session(cfg, self.guard, self.stacks)
        self.session.spill = self._spill_tensor
        # tensor files written while their step runs (Session.HOLD_BYTES), until the writer moves them into place;
        # beside the dump (msprobe refuses a dump folder holding anything but step folders), one folder a process
        self._staging = os.path.join(side_dir(cfg.dump_path), "staging", str(os.getpid()))
        self.steps = StepFilter(cfg.steps, cfg.ranks)
        self.current_step = 0
        self.model = model
        self._modules = ModuleHooks(self.session) if cfg.level in ("L0", "mix") else None
        self._apis = ApiCapture(self.session, cfg.effective_risk_level) if cfg.level in ("L1", "mix") else None
        self._dist = DistributedCapture(self.session) if cfg.level in ("L1", "mix") else None
        self._writer: Optional[StepWriter] = None
        self._seen_rank: Optional[int] = None   # torch.distributed's rank, once it was seen (_rank)
        self._outputs: Optional[StepOutputs] = None   # event file and live graph, beside the dump
        self.live_graph = live_graph
        self.live_graph_interval = live_graph_interval
        self._step_open = False
        self._finished = False
        self._untrap: Optional[Callable[[], None]] = None   # removes the SIGTERM handler (term_signal)
        self._debug = DebugSaver(self.session)
        # at L0 a custom function is the one operator recorded, as in the reference: a capture of its own, whose
        # operator mode is never entered
        custom = self._apis or (ApiCapture(self.session, cfg.effective_risk_level) if cfg.level == "L0" else None)
        self._custom = CustomApis(lambda: custom, self.session)
        self._module_dump = ModuleDumper(self.session, cfg.level, self._pause_operators, self._resume_operators)
        self._tokens = TokenWindow(self._pause_collection, self._resume_collection)
        self._rank_id: Optional[int] = None       # start(rank_id=...): the rank when torch.distributed cannot tell
        self._rank_guessed = False                # a step ended with the rank unknown (_rank_may_be_wanted)
        self._collecting = False                  # between start() and stop()
        self._in_step_block = False               # inside step_fn or collect() (_one_step)
        self._told_scheduled = False
        self._warned: set = set()                 # the kinds of misuse warned about (_warn_once)
        instances.register(self, cfg.dump_path)

    # --- the reference's API --------------------------------------------------------------------------------
    @instances.on_latest
    def start(self, model: Union[torch.nn.Module, Sequence[torch.nn.Module], None] = None,
              token_range: Optional[Sequence[int]] = None, rank_id: Optional[int] = None,
              scheduled_tokens: Any = None) -> None:
        """Begin (or resume) collecting the current step. As the reference's start: `token_range=[first, last]`
        collects only those forwards of the model in inference (token_range.py); `rank_id` names the rank where
        torch.distributed is not initialised; `scheduled_tokens` (a vLLM request's slicing) is not supported: the
        step is collected whole, with one warning."""
        if self._finished:
            return
        keep_own_frames_eager()
        tokens = check_token_range(token_range)
        token_root = check_token_root(model if model is not None else self.model) if tokens is not None else None
        if rank_id is not None:
            if not isinstance(rank_id, int) or isinstance(rank_id, bool) or rank_id < 0:
                raise TbprobeError(f"start: rank_id must be an int >= 0, not {rank_id!r}")
            self._rank_id = rank_id
        if scheduled_tokens is not None and not self._told_scheduled:
            self._told_scheduled = True
            log.warning("tbprobe: start(scheduled_tokens=...) (a vLLM request's slicing) is not supported: "
                        "each step is collected whole")
        if not self.steps.step_wanted(self.current_step) or not self._rank_may_be_wanted():
            self._uninstall_apis()      # (set_init_step may have moved past the collected steps)
            return
        self._open_writer()
        if self._writer.failed:
            self._finish(None)   # (the writer logged why, once)
            return
        model = _uncompiled(model) if model is not None else self.model
        if self._modules is not None:
            if model is None:
                raise TbprobeError(f"level {self.config.level} records modules: give the model to start(model=...), "
                                   "collect(model) or PrecisionDebugger(..., model=...)")
            why = model_problem(model)
            if why:
                raise TbprobeError(why)
            self.model = model
            with torch._C.DisableTorchFunction():   # (the hooks' torch calls are tbprobe's: as in step())
                self._modules.attach(model)
        if not self._step_open:
            self.session.begin_step(self.current_step)
            if self._modules is not None:
                self._modules.begin_step()
            self._module_dump.begin_step()
            self._step_open = True
        self._collecting = True
        self._resume_collection()
        if token_root is not None:
            self._tokens.arm(token_root, tokens)

    @instances.on_latest
    def stop(self) -> None:
        """Pause collection (the step stays open until step())."""
        self._collecting = False
        self._tokens.disarm()
        self._pause_collection()

    # --- the reference's other calls -------------------------------------------------------------------------
    @instances.on_latest
    def register_custom_api(self, module: Any, api: str, api_prefix: Optional[str] = None) -> None:
        """Record `module.<api>` as one operator, `<api_prefix or module.__name__>.<api>.<n>`, at L0, L1 and mix
        (custom_api.py)."""
        self._custom.register(module, api, api_prefix)

    @instances.on_latest
    def restore_custom_api(self, module: Any, api: str) -> None:
        self._custom.restore(module, api)

    def module_dump(self, module: torch.nn.Module, dump_name: str) -> None:
        """At L1, record `module` as one node `Module.<dump_name>.<Class>` until module_dump_end() (module_dump.py);
        also `tbprobe.module_dump(module, dump_name)`, as the reference's function."""
        why = check_module_dump_args(module, dump_name)
        if why:
            raise TbprobeError(why)
        if self._finished:
            return
        try:
            self._module_dump.start(module, dump_name)
        except Exception as exc:
            self.guard.report("module_dump", exc)

    def module_dump_end(self) -> None:
        self._module_dump.end()

    # --- collection on and off: start/stop, a token range, a module_dump window --------------------------------
    def _resume_collection(self) -> None:
        if not self._collecting:
            return
        self.session.active = True
        self._resume_operators()

    def _pause_collection(self) -> None:
        self.session.active = False
        self._pause_operators()

    def _resume_operators(self) -> None:
        if self._apis is not None and self.session.active and not self._module_dump.window_open:
            self._apis.enter()
            self._dist.enter()

    def _pause_operators(self) -> None:
        if self._apis is not None:
            self._apis.exit()
            self._dist.exit()

    @instances.on_latest
    def step(self) -> None:
        """Finish the current step and advance the step counter. With async_dump false (the reference's default)
        step() writes the step's files itself and returns once they are on disk; with true a background thread
        writes them and step() returns at once."""
        # (the step's read-back and files are tbprobe's own torch calls: kept from the user's modes and subclasses)
        with torch._C.DisableTorchFunction():
            self._end_step()

    def _end_step(self) -> None:
        if self.session.active:
            self.stop()
        if self._step_open:
            self._step_open = False
            try:
                if self._modules is not None:
                    self._modules.flush_partial()   # (a pass whose end the engine did not report)
                    self._modules.end_open_calls()   # (a forward a KeyboardInterrupt cut short)
                if self._dist is not None:
                    self._dist.settle(step_end=True)   # asynchronous collectives completed since stop()
                record, values = self.session.end_step()
                record.errors = self.guard.total
                # the rank may have become known during the step (init_process_group after start(), under
                # mp.spawn, where no RANK variable told it before): a rank the filter leaves out writes nothing
                if self.steps.rank_wanted(self._filter_rank()):
                    self._writer.submit(record, values, self._rank_dir())
                    if not self.config.async_dump:
                        self._writer.flush()    # async_dump false: the step's files are complete on return
                if self._rank() is None:
                    self._rank_guessed = True   # (a process alone: its later steps follow the guess, 0)
            except Exception as exc:
                self.guard.report("step end", exc)
            self._debug.end_step()
        self.current_step += 1
        if self.steps.finished(self.current_step) or self._rank_left_out():
            self._finish(None)   # (or a rank the filter leaves out, once that is known: nothing more to collect)
        elif not self.steps.step_wanted(self.current_step):
            self._uninstall_apis()      # the operator capture's wrappers stay only between collected steps

    @instances.on_latest
    def set_init_step(self, step: int) -> None:
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise TbprobeError(f"set_init_step: invalid step {step!r}")
        self.current_step = step

    @instances.on_latest
    def save(self, obj: Any, name: str, save_backward: bool = True) -> None:
        """Level debug: record `obj` (a tensor, or a nested list, tuple or dict of them and plain values) as
        `<name>.<n>.debug` in the step's debug.json, and with `save_backward` its gradients as
        `<name>_grad.<n>.debug` when backward reaches them (debug_save.py)."""
        if self.config.level != "debug" or self._finished:
            return
        # a bad argument mid-training is skipped with a warning (once per kind), as the reference skips it: an
        # exception here would end the user's run
        if not isinstance(name, str):
            self._warn_once("save name", f"save: name must be a str, not {type(name).__name__}: not saved")
            return
        if not isinstance(save_backward, bool):
            self._warn_once("save_backward", f"save: save_backward must be true or false, not {save_backward!r}: "
                                             f"{name!r} not saved")
            return
        if not self.steps.step_wanted(self.current_step):
            return
        try:
            self._open_writer()
            if not self._step_open:
                self.session.begin_step(self.current_step)
                self._step_open = True
            self._debug.save(obj, name, save_backward)
        except Exception as exc:
            self.guard.report("save", exc)

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("tbprobe: %s", message)

    # --- conveniences for training loops --------------------------------------------------------------------
    def step_fn(self, fn: Callable) -> Callable:
        """Decorator: the wrapped function is one training step (start, run, stop, step). A generator function's
        step runs from its first resumption to its end (or close()), a coroutine function's while it is awaited:
        their bodies run after the call, which alone once made an empty step."""
        if inspect.isasyncgenfunction(fn):
            raise TbprobeError(f"step_fn: {fn.__qualname__} is an async generator function, whose steps cannot be "
                               "told apart: decorate the function that runs one step")
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def generator(*args: Any, **kwargs: Any) -> Any:
                with self._one_step(self.model):
                    return (yield from fn(*args, **kwargs))

            return generator
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def coroutine(*args: Any, **kwargs: Any) -> Any:
                with self._one_step(self.model):
                    return await fn(*args, **kwargs)

            return coroutine

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._one_step(self.model):
                return fn(*args, **kwargs)

        return wrapper

    def collect(self, model: Optional[torch.nn.Module] = None) -> ContextManager["PrecisionDebugger"]:
        """Context manager for one training step: ``with debugger.collect(model): ...``."""
        return self._one_step(model)

    @contextlib.contextmanager
    def _one_step(self, model: Optional[torch.nn.Module]) -> Iterator["PrecisionDebugger"]:
        """start, the block, stop and step. A step block inside another (a collect() within a step_fn, a helper
        that collects called from a collected loop) is part of the outer step: it once ended that step halfway,
        and what came after it in the outer block was not recorded."""
        if self._in_step_block:
            yield self
            return
        self._in_step_block = True
        try:
            self.start(model)
        except BaseException:   # (a bad model: the user's error, and no step was begun)
            self._in_step_block = False
            raise
        try:
            yield self
        finally:
            self._in_step_block = False
            self.stop()
            self.step()

    def trainer_callback(self) -> Any:
        """For transformers' Trainer: ``Trainer(..., callbacks=[debugger.trainer_callback()])`` collects each
        optimizer step (all its micro-batches) as one step (hf_trainer.py)."""
        from tbprobe.collector.pytorch.hf_trainer import trainer_callback

        return trainer_callback(self)

    @contextlib.contextmanager
    def capture(self, module: torch.nn.Module) -> Iterator["PrecisionDebugger"]:
        """Scoped capture of one module (and its children) for the duration of the block. Outside collection the
        block starts and stops it (the step still ends at step()); inside it (a collect() block, between start()
        and stop()) the block narrows it, and what comes after the block is recorded as before."""
        if self._modules is None:
            raise TbprobeError("capture(module) needs level L0 or mix")
        if not isinstance(module, torch.nn.Module):
            raise TbprobeError(f"capture(module) takes a torch.nn.Module, not {type(module).__name__}")
        if self.model is None and next(module.children(), None) is None:
            # (taken for the model, whose root is not recorded: the block would record nothing)
            raise TbprobeError(f"capture(module): no model is known yet, and the {type(module).__name__} has no "
                               "submodules to record: give the model that holds it to PrecisionDebugger(model=...), "
                               "start() or collect() first")
        model = self.model if self.model is not None else module
        if not _part_of(module, model):
            raise TbprobeError(f"capture(module): the {type(module).__name__} is not part of the model given to "
                               "start() or collect(), whose modules are the ones recorded: capture one of its "
                               "modules, or give the model that holds it")
        s = self.session
        inside = self._collecting
        outer = s.scope_ids, s.scope_depth
        s.scope_ids = {id(m) for m in module.modules()}
        s.scope_depth = 0
        try:
            if not inside:
                self.start(model)
            yield self
        finally:
            if not inside:
                self.stop()
            s.scope_ids, s.scope_depth = outer

    @property
    def hook_errors(self) -> int:
        """Collector errors caught so far (hooks, and tensor files the writer could not write)."""
        return self.guard.total + (self._writer.file_errors if self._writer is not None else 0)

    def close(self) -> None:
        """Write what is pending and release every hook (also done past the last listed step)."""
        if self._outputs is not None:
            self._outputs.closing = True    # (the last step's live graph is built now, whatever the interval)
        if self._step_open:
            self.step()
        self._finish(None)

    # --- internals --------------------------------------------------------------------------------------------
    def _rank(self) -> Optional[int]:
        if self._rank_id is not None:
            return self._rank_id
        r = _rank()
        if r is not None:
            # kept once known: a step ended after destroy_process_group() is still this rank's (its folder
            # became proc<pid> before)
            self._seen_rank = r
        return r if r is not None else self._seen_rank

    def _filter_rank(self) -> int:
        """The rank the `rank` filter asks about: torch.distributed's; before it is set up, the launcher's (RANK,
        as torchrun sets it); in a process with neither, 0. (A single process once passed every rank filter and
        was dumped, as rank 0, under `"rank": [1]`.)"""
        r = self._rank()
        if r is not None:
            return r
        env = os.environ.get("RANK", "")
        return int(env) if env.isascii() and env.isdigit() else 0

    def _rank_may_be_wanted(self) -> bool:
        """start()'s answer to the `rank` filter. Where the rank is only guessed (no torch.distributed yet, no RANK,
        no rank_id: mp.spawn, init_process_group after start()), the first step is collected whatever the guess,
        and its end, which knows the rank, writes it or not: rank 1 under `"rank": [1]` took itself for rank 0 and
        lost that step. A step that ends with the rank still unknown settles the guess for the later ones."""
        if self.steps.rank_wanted(self._filter_rank()):
            return True
        return not self._rank_known() and not self._rank_guessed

    def _rank_left_out(self) -> bool:
        """Whether the `rank` filter leaves this process out for good: its rank is known and not listed. A guessed
        rank is not: init_process_group may come after the first collected step, and the steps after it are the
        real rank's."""
        return self._rank_known() and not self.steps.rank_wanted(self._filter_rank())

    def _rank_known(self) -> bool:
        """Whether _filter_rank() is this process's rank, not a guess: torch.distributed's, start(rank_id=)'s or the
        launcher's RANK."""
        env = os.environ.get("RANK", "")
        return self._rank() is not None or (env.isascii() and env.isdigit())

    def _rank_dir(self) -> str:
        r = self._rank()
        return f"rank{r}" if r is not None else f"proc{os.getpid()}"

    def _open_writer(self) -> None:
        if self._writer is not None:
            return
        cfg = self.config
        check_writable(cfg.dump_path)
        # (the event files, the live graph and task tensor's staging: failing there at every step, counted as hook
        # errors, where the dump folder was writable and its parent was not)
        check_writable(side_dir(cfg.dump_path), what="the folder beside dump_path for tbprobe's event files, live "
                                                     "graph and tensor staging,")
        # (level debug writes debug.json alone, as the reference does: no graph to show)
        self._outputs = StepOutputs(cfg.dump_path, self.guard,
                                    self.live_graph and cfg.extra_info and cfg.level != "debug",
                                    self.live_graph_interval)
        self._writer = StepWriter(cfg.dump_path, cfg.task, cfg.level, "pytorch", cfg.extra_info, self.stacks,
                                  save_tensor=save_tensor, on_step_written=self._outputs.on_written,
                                  background=cfg.async_dump, on_disk_full=self._outputs.disk_full)
        # (run after the writer's drain below: atexit runs last-registered first) the live graph marked ended,
        # so TensorBoard's page stops waiting for more steps of a run that exited without close()
        atexit.register(self._outputs.close)
        # the writer thread is a daemon: drain it at interpreter exit so the last step is not lost
        atexit.register(self._writer.close)
        # (registered after it, so run before it) the step the process ends in, unfinished: a script without
        # step() or close(), an uncaught error, sys.exit() mid-step. Its records are what a user debugging the
        # crash needs; the reference writes them too. (A weak reference: the debugger is not kept alive for it.)
        atexit.register(_write_unfinished_step, weakref.ref(self))
        # and the step a launcher's SIGTERM ends (the other ranks of a job one of whose ranks failed), which skips
        # atexit: written, then the process ends as SIGTERM ends it
        self._untrap = on_terminate(self, functools.partial(_write_unfinished_step, weakref.ref(self), "SIGTERM"))

    def _uninstall_apis(self) -> None:
        if self._apis is not None:
            self._apis.uninstall()

    def _finish(self, message: Optional[str]) -> None:
        if self._finished:
            return
        self._finished = True
        if self._outputs is not None:
            self._outputs.closing = True
        if message:
            log.error("tbprobe: %s", message)
        self.stop()
        self.session.forget_watches()
        self._uninstall_apis()
        self._custom.restore_all()
        self._module_dump.detach()
        self._tokens.remove()
        if self._modules is not None:
            self._modules.detach()
        if self._writer is not None:
            self._writer.close()
        if self._untrap is not None:
            self._untrap()
            self._untrap = None
        if os.path.isdir(self._staging):   # (files of steps not written: a rank filter's, a failed writer's)
            shutil.rmtree(self._staging, ignore_errors=True)
        if self._outputs is not None:
            self._outputs.close()

    def _spill_tensor(self, step: int, fname: str, t: torch.Tensor) -> str:
        folder = os.path.join(self._staging, f"step{step}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, fname)
        save_tensor(path, t)
        return path


def _write_unfinished_step(ref: "weakref.ref[PrecisionDebugger]", why: str = "") -> None:
    """At interpreter exit (or at SIGTERM, `why`): write the step a debugger is still in, as close() would."""
    dbg = ref()
    if dbg is None or not dbg._step_open or dbg._finished:
        return
    try:
        # (each rank of a job says it: the rank names which one, or the lines of two ranks read as one doubled)
        r = dbg._rank()
        who = f"rank {r}" if r is not None else f"process {os.getpid()}"
        if why:
            log.warning("tbprobe: %s: %s came inside step %d: writing what it recorded before the process ends",
                        who, why, dbg.current_step)
            if dbg._dist is not None:   # (the collective it waits in, when it does: where the rank was stuck)
                dbg._dist.record_in_flight()
        else:
            log.warning("tbprobe: %s: the process is ending inside step %d: writing what it recorded (call step() "
                        "or close() to end it yourself)", who, dbg.current_step)
        dbg.close()
    except Exception as exc:   # (never a traceback from an exit handler)
        log.warning("tbprobe: the unfinished step %d could not be written: %s", dbg.current_step, exc)
