"""The floor under an L0 collector built on PyTorch's own hooks: what the hooks cost when they do nothing.

    .venv/bin/python bench/hook_floor.py [--rounds 300 | --quick] [--cxx]

The same small GPT training step as bench/collector_overhead.py ("small"), in one process, with five set-ups
interleaved round by round (medians of CPU time per step):
  none         no hooks at all
  noop         a forward pre- and post-hook (with kwargs) on every module, returning at once
  alias        as noop, the pre-hook also hands the module plain views (`x.view_as(x)`) of its inputs
  alias+nodes  as alias, with a do-nothing prehook on the autograd node of each view and of each output
  all          as alias+nodes, with a do-nothing hook on every parameter
With --cxx (compiles a small C++ extension against libtorch, about a minute, g++ and ninja needed):
  c++ nodes    as alias+nodes, the node hooks being C++ FunctionPreHooks that never enter Python (what moving
               the backward capture out of Python would save on the hooks' side)
"all" is the mechanics tbprobe's L0 needs before it records anything (a module's inputs, outputs, parameters and
its backward's gradients, with in-place work inside modules still allowed); its ratio to "none" is the least an
L0 collector built this way can cost on this model.
"""
import argparse
import os
import statistics
import time
from functools import partial


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--quick", action="store_true", help="60 rounds")
    p.add_argument("--cxx", action="store_true", help="add the C++ node hooks set-up (builds an extension)")
    args = p.parse_args()
    if args.quick:
        args.rounds = 60
    # (this folder is on the path of a script run from it)
    import torch
    from collector_overhead import SMALL, gpt_training

    model, train_step = gpt_training(SMALL)
    modules = [m for name, m in model.named_modules() if name]

    def node_hook(*_):
        return None

    def pre_noop(mod, a, k):
        return None

    def post_noop(mod, a, k, out):
        return None

    def pre_alias(mod, a, k):
        return tuple(t.view_as(t) if isinstance(t, torch.Tensor) and t.requires_grad else t for t in a), k

    def pre_alias_nodes(mod, a, k):
        new = []
        for t in a:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t = t.view_as(t)
                t.grad_fn.register_prehook(partial(node_hook, 0, 0))
            new.append(t)
        return tuple(new), k

    def post_nodes(mod, a, k, out):
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                t.grad_fn.register_prehook(partial(node_hook, 0, 0))

    setups = {"none": None, "noop": (pre_noop, post_noop, False), "alias": (pre_alias, post_noop, False),
              "alias+nodes": (pre_alias_nodes, post_nodes, False), "all": (pre_alias_nodes, post_nodes, True)}
    if args.cxx:
        hook_node = _cxx_hook_node()

        def pre_alias_cxx(mod, a, k):
            new = []
            for t in a:
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t = t.view_as(t)
                    hook_node(t)
                new.append(t)
            return tuple(new), k

        def post_cxx(mod, a, k, out):
            for t in out if isinstance(out, (list, tuple)) else [out]:
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    hook_node(t)

        setups["c++ nodes"] = (pre_alias_cxx, post_cxx, False)
    handles = []

    def install(setup):
        for h in handles:
            h.remove()
        handles.clear()
        if setup is None:
            return
        pre, post, params = setup
        for m in modules:
            handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(m.register_forward_hook(post, with_kwargs=True))
        if params:
            for prm in model.parameters():
                handles.append(prm.register_hook(node_hook))

    def step() -> float:
        t0 = time.process_time()
        train_step()
        return time.process_time() - t0

    times = {k: [] for k in setups}
    for _ in range(args.rounds):
        for name, setup in setups.items():
            install(setup)
            step()                       # one unmeasured step after each switch
            times[name].append(step())
    install(None)
    base = statistics.median(times["none"])
    print(f"{len(modules)} modules, {sum(1 for _ in model.parameters())} parameters, {args.rounds} rounds")
    for name in setups:
        t = statistics.median(times[name])
        print(f"{name:<12} {t * 1e3:6.2f} ms  {t / base:5.2f}x  (+{(t - base) * 1e3:.2f} ms)")


_CXX = r"""
#include <torch/extension.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

// Reads the gradient's size, as a real hook would read it, and returns the gradients unchanged.
struct NoteHook : torch::autograd::FunctionPreHook {
  int64_t *seen;
  explicit NoteHook(int64_t *s) : seen(s) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list &grads) override {
    if (!grads.empty() && grads[0].defined()) *seen += grads[0].numel();
    return grads;
  }
};

static int64_t seen = 0;

void hook_node(const at::Tensor &t) {
  auto fn = t.grad_fn();
  if (fn) fn->add_pre_hook(std::make_unique<NoteHook>(&seen));
}
"""


def _cxx_hook_node():
    import tempfile

    from torch.utils.cpp_extension import load_inline

    build = os.path.join(tempfile.gettempdir(), "tbprobe_hook_floor_cxx")
    os.makedirs(build, exist_ok=True)
    print("building the C++ node hook (about a minute)...", flush=True)
    return load_inline("tbprobe_hook_floor", cpp_sources=_CXX, functions=["hook_node"], build_directory=build,
                       extra_cflags=["-O2"]).hook_node


if __name__ == "__main__":
    main()
