"""TrainerMon: the training monitor a user attaches once; it then follows the optimizer's steps by itself.

    mon = TrainerMon("monitor_config.json")
    mon.set_monitor(model, optimizer, grad_acc_steps=1)
    for batch in data: ...; loss.backward(); optimizer.step()   # nothing else to call

Per step: hooks queue device-side statistics; the optimizer's post-step hook stacks them, reads them back in one
transfer and hands the host array to the rank's writer thread. Nothing the monitor does raises into training once
``set_monitor`` has returned: failures are logged and counted in ``mon.errors``.
"""
import atexit
import dataclasses
import json
import logging
import os
import weakref
from typing import Any, Dict, List, Optional

import torch

from tbprobe.collector.writer import check_writable
from tbprobe.errors import TbprobeError
from tbprobe.monitor.config import MonitorConfig, load_config
from tbprobe.monitor.hooks import install_module_hooks, install_param_hooks
from tbprobe.monitor.optimizer_stats import record_post_step, record_pre_step
from tbprobe.monitor.stats import StatBatch
from tbprobe.monitor.targets import Selection, print_structure, select_targets, trainable
from tbprobe.monitor.writer import MonitorWriter

__all__ = ["TrainerMon"]

_log = logging.getLogger("tbprobe.monitor")


def _dist_rank_world():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class TrainerMon:
    """Records per-module, per-parameter statistics of a training run as TensorBoard scalars, one run per rank."""

    def __init__(self, config_file_path: Optional[str] = None, process_group: Any = None,
                 params_have_main_grad: bool = False, opt_ty: Any = None, *, config_path: Optional[str] = None) -> None:
        # config_file_path: the reference's name for it (its documentation's calls pass it by keyword);
        # config_path: this package's other name for the same. opt_ty: accepted for the reference's older
        # signature; the optimizer is inspected directly.
        if (config_file_path is None) == (config_path is None):
            raise TypeError("TrainerMon: give the monitor's config file once, as config_file_path (or config_path)")
        self.config_path = str(config_file_path if config_path is None else config_path)
        self.config: MonitorConfig = load_config(self.config_path)
        self.process_group = process_group
        self.params_have_main_grad = bool(params_have_main_grad)
        self.dynamic = os.environ.get("DYNAMIC_MONITOR", "").strip().lower() == "true"
        self._config_mtime = self._mtime()
        self.rank, self.world_size = _dist_rank_world()
        self.errors = 0
        self.step = 0
        self.grad_acc_steps = 1
        self.active = False  # whether the step now running is recorded (hooks check this first)
        self.monitoring = False  # hooks installed
        self.selection = Selection()
        self.micro_counters: List[Dict[str, int]] = []
        self.pending_calls: List[List[Any]] = []   # per hooked module, its calls begun and not yet ended (hooks.py)
        self.tensor_hooks: List[Any] = []   # activation-gradient hooks of the step running (hooks.py)
        self.dp_group = None
        self.tp_group = None
        self._models: List[torch.nn.Module] = []
        self._optimizer = None
        self._handles: List[Any] = []
        self._batch = StatBatch()
        self._shapes: Dict[str, list] = {}
        self._new_shapes: Dict[str, list] = {}
        # series that may be non-finite by design (inputs that need no gradient: a mask), for the anomaly scan
        self._quiet: set = set()
        self._new_quiet: List[str] = []
        self._collected = 0
        self._start_at = 0
        self._writer: Optional[MonitorWriter] = None
        self._record_unreduced = False
        self._wrapped_optimizer = None   # (set_wrapped_optimizer)
        self._grads_after_step = False   # the step running was given a closure (_pre_step)
        self._root_handles: List[Any] = []
        self._layout: tuple = ()
        self._layout_checked = False
        _LIVE.add(self)

    # -- public API ------------------------------------------------------------------------------------------
    def set_monitor(self, model, optimizer, grad_acc_steps: int = 1, tp_group: Any = None, dp_group: Any = None,
                    start_iteration: int = 0) -> None:
        """Attach to ``model`` (a module or a list of model chunks) and ``optimizer`` (a torch optimizer; pass
        ``optimizer.optimizer`` for DeepSpeed/accelerate wrappers). Bad arguments or targets: TbprobeError."""
        for label, value, low in (("grad_acc_steps", grad_acc_steps, 1), ("start_iteration", start_iteration, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise TbprobeError(f"set_monitor: {label} must be an integer >= {low}, got {value!r}")
        models = list(model) if isinstance(model, (list, tuple)) else [model]
        if not models or not all(isinstance(m, torch.nn.Module) for m in models):
            raise TbprobeError("set_monitor: model must be a torch.nn.Module or a list of them")
        if not hasattr(optimizer, "step") or not hasattr(optimizer, "param_groups"):
            raise TbprobeError(
                f"set_monitor: {type(optimizer).__name__} is not a torch optimizer (no param_groups); "
                "for DeepSpeed or accelerate pass the wrapped optimizer, optimizer.optimizer"
            )
        self.grad_acc_steps = grad_acc_steps
        self.tp_group, self.dp_group = tp_group, dp_group
        self.rank, self.world_size = _dist_rank_world()
        self._models = models
        self.step = start_iteration
        # Checked now, so a bad target fails before the first step rather than silently recording nothing.
        self.selection = self._select()
        if self.config.print_struct:
            print_structure(models, self.config.output_root(), self.rank)
        ranks = self.config.module_ranks
        if ranks and not any(r < self.world_size for r in ranks):
            run = "a single process" if self.world_size == 1 else f"ranks 0-{self.world_size - 1}"
            _log.warning("tbprobe monitor: module_ranks %s names no rank of this run (%s): nothing is recorded on "
                         "rank %d", ranks, run, self.rank)
        if self._rank_selected():
            # (the writer is made at the first recorded step: a folder it cannot write was a warning per step)
            check_writable(self.config.output_root(), "monitor output_dir")
        if self._optimizer is None:
            self._hook_optimizer(optimizer)
        self._optimizer = optimizer
        if not self.dynamic or self.config.dynamic_on:
            # (switched on dynamically, recording starts at once: start_step does not apply, as in the reference)
            self._start(self.step if self.dynamic else self.config.start_step)

    def monitor_gnorm_with_ad(self, model, optimizer=None, grad_acc_steps: int = 1, tp_group: Any = None,
                              dp_group: Any = None, start_iteration: int = 0) -> None:
        """The reference's older name of set_monitor; the optimizer may come from set_wrapped_optimizer."""
        if optimizer is None:
            optimizer = self._wrapped_optimizer
            if optimizer is None:
                raise TypeError("monitor_gnorm_with_ad: give the optimizer, or call set_wrapped_optimizer() first")
        self.set_monitor(model, optimizer, grad_acc_steps, tp_group, dp_group, start_iteration)

    def set_wrapped_optimizer(self, optimizer) -> None:
        """The reference's older way to hand over the optimizer that monitor_gnorm_with_ad() then uses."""
        self._wrapped_optimizer = optimizer

    def reload_xy(self, xy_distribution: bool = False) -> None:
        """The reference's deprecated switch of the activation statistics (DYNAMIC_MONITOR replaces it): on or off
        from now on, within the same collection window."""
        _log.warning("tbprobe monitor: reload_xy() is deprecated (as in the reference): use DYNAMIC_MONITOR and "
                     "the config's xy_distribution")
        self.config = dataclasses.replace(self.config, xy_distribution=bool(xy_distribution))
        if not self._models:
            return
        self.selection = self._select()
        if self.monitoring:
            start, collected = self._start_at, self._collected
            self._stop_hooks()
            self._start(start)
            self._collected = collected

    def close(self) -> None:
        """Write everything still queued and close the event file (also done at interpreter exit)."""
        self._stop_hooks()
        if self._writer is not None:
            self._writer.close()

    def flush(self) -> None:
        """Wait until every recorded step is on disk (useful before reading the files in the same process)."""
        if self._writer is not None:
            self._writer.flush()

    @property
    def run_dir(self) -> str:
        return os.path.join(self.config.output_root(), f"rank{self.rank}")

    @property
    def anomalies(self) -> int:
        return self._writer.anomaly_count if self._writer else 0

    # -- used by the hooks -----------------------------------------------------------------------------------
    def record(self, key: str, vector: torch.Tensor, source: torch.Tensor, quiet: bool = False) -> None:
        """Queue one tensor's statistics. `quiet`: a series that may be non-finite by design (a module input that
        needs no gradient, such as a causal mask of -inf): non-finite from its first value, it is no anomaly."""
        if source.numel() == 0:
            # nothing to measure: no series (its NaN statistics raised an AnomalyNan at every step), as the
            # reference writes no rows of an empty parameter
            return
        self._batch.add(key, vector)
        if key not in self._shapes:
            self._shapes[key] = self._new_shapes[key] = [list(source.shape), str(source.dtype)]
            if quiet:
                self._quiet.add(key)
                self._new_quiet.append(key)

    def fault(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        if self.errors <= 5:
            _log.warning("tbprobe monitor: %s failed (%s: %s); training continues", where, type(exc).__name__, exc)

    # -- lifecycle -------------------------------------------------------------------------------------------
    def _select(self) -> Selection:
        cfg = self.config
        all_modules = cfg.xy_distribution and (cfg.all_xy or not cfg.targets)
        sel = select_targets(self._models, cfg.targets, all_modules)
        if not cfg.xy_distribution:
            sel.modules = []
        return sel

    def _rank_selected(self) -> bool:
        return not self.config.module_ranks or self.rank in self.config.module_ranks

    def _start(self, start_step: int) -> None:
        self._start_at = start_step
        self._collected = 0
        if not self._rank_selected():
            return
        # Under FSDP2 (DTensor parameters) the reduce-scatter runs inside FSDP before any hook on the sharded
        # parameter could see the local gradient: there is no unreduced gradient to take.
        sharded = any(p.__class__.__name__ == "DTensor" for _, p in self.selection.params)
        self._record_unreduced = (self.config.wg_distribution and not sharded
                                  and (self.world_size > 1 or self.dp_group is not None))
        self._install_hooks()
        self._layout = self._model_layout()
        self._layout_checked = False
        # (the model's first forward of a recorded step checks whether a submodule was replaced: _check_layout)
        # (prepend: before FSDP2's own pre-forward hook, which puts unsharded parameters in the modules)
        self._root_handles = [m.register_forward_pre_hook(self._root_pre_hook, prepend=True) for m in self._models]
        self.monitoring = True
        self.active = self._should_record(self.step)

    def _install_hooks(self) -> None:
        self.micro_counters = []
        self.pending_calls = []
        self._handles = install_module_hooks(self, self.selection.modules)
        if self._record_unreduced:
            # (a frozen parameter takes no gradient hook; one unfrozen later has no grad_unreduced)
            self._handles += install_param_hooks(self, trainable(self.selection.params))

    def _model_layout(self) -> tuple:
        """Which module objects the model holds, in order (ids; the selection keeps the selected ones alive, so
        an id is not reused while it counts). Modules only: FSDP2 swaps every parameter object between its
        sharded and unsharded one at each forward; a replaced submodule brings new parameters with it."""
        return tuple(id(x) for m in self._models for x in m.modules())

    def _root_pre_hook(self, module, args) -> None:
        if self.active and not self._layout_checked and not torch.compiler.is_compiling():
            self._check_layout()

    def _check_layout(self) -> None:
        """Once per recorded step, before its first forward (else before the optimizer reads its statistics):
        a submodule replaced between steps (`model.head = nn.Linear(...)`, a layer swapped in) kept its old
        module's hooks and its old parameters' names, which then wrote the parameters no longer in the model
        (their frozen values, their optimizer state) as the new ones'. The targets are selected again and the
        hooks moved to what the model holds now."""
        self._layout_checked = True
        try:
            layout = self._model_layout()
            if layout == self._layout:
                return
            self._layout = layout
            try:
                selection = self._select()
            except TbprobeError as exc:
                _log.warning("tbprobe monitor: the model changed and the targets no longer match (%s): the "
                             "earlier modules and parameters are still recorded", exc)
                return
            _log.info("tbprobe monitor: the model's modules changed: targets selected again")
            self.selection = selection
            handles, self._handles = self._handles, []
            _remove(handles)
            self._install_hooks()
        except Exception as exc:  # noqa: BLE001
            self.fault("model change check", exc)

    def _stop_hooks(self) -> None:
        handles, self._handles = self._handles + self._root_handles, []
        self._root_handles = []
        _remove(handles)
        self._remove_tensor_hooks()
        self.micro_counters = []
        self.pending_calls = []
        self.monitoring = False
        self.active = False
        self._batch.clear()

    def _remove_tensor_hooks(self) -> None:
        hooks, self.tensor_hooks = self.tensor_hooks, []
        _remove(hooks)

    def _should_record(self, step: int) -> bool:
        if not self.monitoring or self._collected >= self.config.collect_times or step < self._start_at:
            return False
        return (step - self._start_at) % self.config.step_interval == 0

    def _hook_optimizer(self, optimizer) -> None:
        if hasattr(optimizer, "register_step_pre_hook") and hasattr(optimizer, "register_step_post_hook"):
            # (torch passes the step's arguments with the optimizer itself first)
            optimizer.register_step_pre_hook(
                lambda opt, args, kwargs: self._pre_step(opt, args[1:] if args and args[0] is opt else args, kwargs))
            optimizer.register_step_post_hook(lambda opt, args, kwargs: self._post_step(opt))
            return
        original = optimizer.step  # not a torch.optim.Optimizer: wrap its step instead

        def step(*args, **kwargs):
            self._pre_step(optimizer, args, kwargs)
            out = original(*args, **kwargs)
            self._post_step(optimizer)
            return out

        optimizer.step = step

    def _pre_step(self, optimizer, args: tuple = (), kwargs: Optional[dict] = None) -> None:
        if not self.active:
            return
        if not self._layout_checked:
            self._check_layout()
        try:
            # A step given a closure (LBFGS; any optimizer's step(closure)) computes its gradients itself, inside
            # the step: before it, .grad is the previous step's (none at the first), which was written under
            # this step's number. Its gradients are read after the step instead.
            closure = (kwargs or {}).get("closure", args[0] if args else None)
            self._grads_after_step = callable(closure)
            record_pre_step(self, optimizer, grads=not self._grads_after_step)
        except Exception as exc:  # noqa: BLE001
            self.fault("optimizer pre-step", exc)

    def _post_step(self, optimizer) -> None:
        try:
            if self.active:
                record_post_step(self, optimizer, grads=self._grads_after_step)
                self._flush_step()
        except Exception as exc:  # noqa: BLE001
            self.fault("optimizer post-step", exc)
            self._batch.clear()
        self.step += 1
        self._grads_after_step = False
        self._layout_checked = False
        self._remove_tensor_hooks()
        for counter in self.micro_counters:
            counter["n"] = 0
        for pending in self.pending_calls:   # (calls whose forward raised: their forward hook never ran)
            pending.clear()
        try:
            if self.dynamic:
                self._check_dynamic()
            if self.monitoring and self._collected >= self.config.collect_times:
                self._finish()
            self.active = self._should_record(self.step)
        except Exception as exc:  # noqa: BLE001
            self.fault("step bookkeeping", exc)
            self.active = False

    def _flush_step(self) -> None:
        batch, self._batch = self._batch, StatBatch()
        self._collected += 1
        if not len(batch):
            return
        values = batch.read_back(len(self.config.ops))  # the one device->host transfer of the step
        if self._writer is None:
            self._writer = MonitorWriter(
                self.run_dir, self.config.ops, self.config.alert_rules, self.rank,
                info={"writer": "tbprobe", "world_size": self.world_size, "grad_acc_steps": self.grad_acc_steps,
                      "ops_order": self.config.ops_order},
                non_finite=self.config.non_finite, quiet=self._quiet,
            )
            self._new_quiet = []
        shapes, self._new_shapes = self._new_shapes, {}
        quiet, self._new_quiet = self._new_quiet, []
        self._writer.submit(self.step, batch.keys, values, shapes, quiet)

    def _finish(self) -> None:
        _log.info("tbprobe monitor: collected %d steps, stopping", self._collected)
        self._stop_hooks()
        if self.dynamic:
            self._set_dynamic_off()

    # -- dynamic on/off ----------------------------------------------------------------------------------------
    def _mtime(self) -> int:
        try:
            return os.stat(self.config_path).st_mtime_ns
        except OSError:
            return 0

    def _check_dynamic(self) -> None:
        """One stat() per step; the config is re-read only when the file changed."""
        mtime = self._mtime()
        if mtime == self._config_mtime:
            return
        self._config_mtime = mtime
        try:
            cfg = load_config(self.config_path)
        except TbprobeError as exc:
            _log.warning("tbprobe monitor: config change ignored: %s", exc)
            return
        if not cfg.dynamic_on:
            if self.monitoring:
                self._stop_hooks()
            self.config = cfg
            return
        old = self.config
        self.config = cfg
        try:
            self.selection = self._select()
        except TbprobeError as exc:
            _log.warning("tbprobe monitor: config change ignored: %s", exc)
            self.config = old
            return
        if self._writer is not None and self._writer.ops != cfg.ops:
            self._writer.close()
            self._writer = None
        self._stop_hooks()
        self._start(self.step)  # from the next step on; start_step does not apply, as in the reference

    def _set_dynamic_off(self) -> None:
        try:
            with open(self.config_path, encoding="utf-8") as f:
                raw = json.load(f)
            raw["dynamic_on"] = False
            tmp = self.config_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(raw, f, indent=2)
            os.replace(tmp, self.config_path)
            self._config_mtime = self._mtime()
        except (OSError, ValueError) as exc:
            _log.warning("tbprobe monitor: could not switch dynamic_on off in %s: %s", self.config_path, exc)


def _remove(handles: List[Any]) -> None:
    """Remove hooks; one that cannot be removed (its tensor or module gone) is left, never raised into training."""
    for h in handles:
        try:
            h.remove()
        except Exception:  # noqa: BLE001
            pass


_LIVE: "weakref.WeakSet[TrainerMon]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for mon in list(_LIVE):
        try:
            mon.close()
        except Exception:  # noqa: BLE001
            pass
