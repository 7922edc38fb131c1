"""How a call was written (tbprobe/collector/pytorch/call_site.py), and the operator records it gives their layout."""
import functools

import torch
import torch.nn.functional as F
from conftest import load_rank, make_debugger, rank_dirs

from tbprobe.collector.pytorch.call_site import written_call


def _callee(a, b=1, *, c=2):
    return written_call(_callee.__code__)


def test_written_call_reads_positions_and_keyword_names_off_the_callers_instruction():
    assert _callee(1) == (1, (), False)
    assert _callee(1, 2) == (2, (), False)
    assert _callee(1, c=3) == (1, ("c",), False)
    assert _callee(a=1, b=2, c=3) == (0, ("a", "b", "c"), False)
    # a call through *args/**kwargs says nothing exact
    assert _callee(*(1, 2)) is None and _callee(1, **{"c": 3}) is None
    # a frame that is not running: None
    assert written_call((lambda: None).__code__) is None


def _records(tmp_path, fn):
    dbg = make_debugger(tmp_path, level="L1", steps=1)
    with dbg.collect():
        fn()
    dbg.close()
    assert dbg.hook_errors == 0
    return load_rank(rank_dirs(str(tmp_path / "dump"))[0])["dump"]["data"]


def _layout(entry):
    return ([a["type"] if isinstance(a, dict) else a for a in entry["input_args"]],
            {k: v["value"] for k, v in entry["input_kwargs"].items()})


def test_functional_calls_are_recorded_as_written(tmp_path):
    """msprobe wraps torch.nn.functional's functions and records each call as written; tbprobe's operator mode gets
    every parameter as a keyword and rebuilds the call from the call site."""
    x = torch.randn(2, 8, 4, 4, requires_grad=True)
    emb = torch.nn.Embedding(10, 3)
    pool = torch.nn.MaxPool2d(2)

    def calls():
        F.softmax(x, dim=1, dtype=torch.float32)
        F.softmax(x, 1)
        emb(torch.tensor([1, 2]))           # nn.Embedding passes its seven arguments by position
        pool(x)                             # a boolean-dispatched function: five by position, two by keyword
        functools.partial(F.softmax, dim=2)(x)

    data = _records(tmp_path, calls)
    assert _layout(data["Functional.softmax.0.forward"]) == (["torch.Tensor"], {"dim": 1, "dtype": "torch.float32"})
    assert _layout(data["Functional.softmax.1.forward"]) == (["torch.Tensor", "int"], {})
    args, kwargs = _layout(data["Functional.embedding.0.forward"])
    assert len(args) == 7 and kwargs == {}
    args, kwargs = _layout(data["Functional.max_pool2d.0.forward"])
    assert len(args) == 5 and sorted(kwargs) == ["ceil_mode", "return_indices"]
    # through a partial the call site is not the call's (dim=2 is nowhere in it): the rebuilt call, dim kept
    args, kwargs = _layout(data["Functional.softmax.2.forward"])
    assert args == ["torch.Tensor", "int"] and kwargs == {}
    assert data["Functional.softmax.2.forward"]["input_args"][1]["value"] == 2


class _Box:
    def norm(self, p=1, dim=None):
        return written_call(_Box.norm.__code__)


def test_written_call_tells_a_method_of_a_value_from_one_looked_up_on_the_class():
    x, Tensor, a = _Box(), _Box, [1]
    # (called outside the asserts, which pytest rewrites into other instructions)
    sites = [x.norm(2, dim=1), x.norm(dim=a[0]), Tensor.norm(x, 2, dim=1), _callee(1, c=3), x.norm(1 if a else 2)]
    assert sites[0] == (1, ("dim",), True)          # self goes ahead of the arguments
    assert sites[1] == (0, ("dim",), True)
    assert sites[2] == (2, ("dim",), False)         # on the class: every argument written
    assert sites[3] == (1, ("c",), False)
    # a conditional argument (jumps among the arguments' instructions): not walked, read as not a method
    assert sites[4] == (1, (), False)


def test_tensor_methods_and_recurrent_kernels_are_recorded_as_the_reference_records_them(tmp_path):
    """Checked against msprobe 26.2.0's dump of the same calls: `x.norm(2, dim=1)` keeps dim a keyword (the mode
    gets every parameter as one, and the call site counts the arguments after x); a direct torch.lstm is
    Torch.lstm, while the kernels nn.LSTM/nn.RNN/nn.GRU call through torch._VF (which the reference does not
    record) are VF.<name> alike."""
    x = torch.randn(4, 6, requires_grad=True)
    lstm, rnn, gru = torch.nn.LSTM(6, 3), torch.nn.RNN(6, 3), torch.nn.GRU(6, 3)
    h, c = torch.zeros(1, 4, 3), torch.zeros(1, 4, 3)

    def calls():
        x.norm(2, dim=1)
        x.norm(dim=1)
        torch.Tensor.norm(x, 2, dim=1)
        x.unique(sorted=True)
        seq = x.unsqueeze(1).expand(4, 4, 6)
        lstm(seq), rnn(seq), gru(seq)
        torch.lstm(seq, (h, c), tuple(lstm._flat_weights), True, 1, 0.0, False, False, False)

    data = _records(tmp_path, calls)
    assert _layout(data["Tensor.norm.0.forward"]) == (["torch.Tensor", "int"], {"dim": 1})
    assert _layout(data["Tensor.norm.1.forward"]) == (["torch.Tensor"], {"dim": 1})
    assert _layout(data["Tensor.norm.2.forward"]) == (["torch.Tensor", "int"], {"dim": 1})
    assert _layout(data["Tensor.unique.0.forward"]) == (["torch.Tensor"], {"sorted": True})
    kernels = sorted(k for k in data if k.endswith(".forward") and k.split(".")[1] in ("lstm", "rnn_tanh", "gru"))
    assert kernels == ["Torch.lstm.0.forward", "VF.gru.0.forward", "VF.lstm.0.forward", "VF.rnn_tanh.0.forward"]


def test_the_stack_of_a_function_written_in_python_starts_at_its_caller(tmp_path):
    """F.relu and Tensor.norm hand themselves to the operator mode through torch's handle_torch_function: their
    stacks began with that frame and the function's own line, where msprobe's (which wraps the function) begin
    at the caller. A C function's stack began at the caller already."""
    import inspect

    from conftest import load_rank

    x = torch.randn(3, 4)
    lines = {}

    def calls():
        F.relu(x); lines["relu"] = inspect.currentframe().f_lineno      # noqa: E702
        x.norm(dim=1); lines["norm"] = inspect.currentframe().f_lineno  # noqa: E702
        torch.exp(x); lines["exp"] = inspect.currentframe().f_lineno    # noqa: E702
        # (through torch's boolean_dispatch, which picks one of two functions by return_indices)
        F.max_pool1d(x[None], 2); lines["pool"] = inspect.currentframe().f_lineno                       # noqa: E702
        F.max_pool1d(x[None], 2, return_indices=True); lines["indices"] = inspect.currentframe().f_lineno  # noqa: E702

    _records(tmp_path, calls)
    stack = load_rank(rank_dirs(str(tmp_path / "dump"))[0])["stack"]
    first = {name: frames[0] for names, frames in stack.values() for name in names}
    for name, key in (("Functional.relu.0.forward", "relu"), ("Tensor.norm.0.forward", "norm"),
                      ("Torch.exp.0.forward", "exp"), ("Functional.max_pool1d.0.forward", "pool"),
                      ("Functional.max_pool1d.1.forward", "indices")):
        assert f"test_call_site.py, line {lines[key]}, in calls," in first[name], (name, first[name])


def test_a_stack_through_a_method_whose_body_the_mode_runs_again_holds_that_method_once(tmp_path):
    """`0 in x` and `loss.backward()` hand themselves to the operator mode (torch's handle_torch_function), which
    runs their body again with the mode on: the stacks of the calls inside held the method twice, with
    handle_torch_function between, where msprobe's hold it once (a reentrant checkpoint's recomputation runs inside
    the backward)."""
    from torch.utils.checkpoint import checkpoint

    lin = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)

    def calls():
        assert 0.5 not in x
        checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=True).sum().backward()

    _records(tmp_path, calls)
    stack = load_rank(rank_dirs(str(tmp_path / "dump"))[0])["stack"]
    frames = {name: lines for names, lines in stack.values() for name in names}
    inside_in = frames["Tensor.__eq__.0.forward"]
    assert "in __contains__," in inside_in[0] and "in calls," in inside_in[1], inside_in[:2]
    recomputed = frames["Torch.tanh.1.forward"]    # (tanh.0: the checkpoint's first forward)
    assert sum("in backward," in f and "_tensor.py" in f for f in recomputed) == 1, recomputed
    assert not any("in handle_torch_function," in f for lines in frames.values() for f in lines)


def test_the_wrappers_of_pythons_functionals_last_the_collected_steps_alone(tmp_path):
    """F.sigmoid and its kin are wrapped (to hand themselves to the mode) from the first collected step on, and
    put back once no step is left to collect; the wrapper gives the function's own result."""
    orig = F.sigmoid
    x = torch.randn(3)
    dbg = make_debugger(tmp_path, level="L1", steps=1)
    with dbg.collect():
        assert F.sigmoid is not orig and F.sigmoid.__wrapped__ is orig
        assert torch.equal(F.sigmoid(x), orig(x))
    assert F.sigmoid is orig
    dbg.close()
    assert dbg.hook_errors == 0


def test_a_frame_without_a_source_line_is_left_out_of_the_stack(tmp_path):
    """Code compiled from a string (`python -c`, multiprocessing spawn's entry, exec) has no line to show: the
    reference leaves such a frame out of its stacks, and so does tbprobe; the frames around it stay."""
    from conftest import load_rank

    x = torch.randn(3)
    scope = {"torch": torch, "x": x}

    def calls():
        exec(compile("torch.exp(x)", "<generated>", "exec"), scope)

    _records(tmp_path, calls)
    stack = load_rank(rank_dirs(str(tmp_path / "dump"))[0])["stack"]
    (frames,) = [frames for names, frames in stack.values() if "Torch.exp.0.forward" in names]
    assert not any(f.startswith("File <generated>") for f in frames), frames
    assert "in calls," in frames[0] and "exec(compile(" in frames[0]
