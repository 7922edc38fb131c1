"""The step record's entries leave the cyclic GC: what that takes, and that nothing else changes."""
import gc

from conftest import make_debugger
from run_model import train

from tbprobe.collector._cstats import untrack_tree
from tbprobe.collector.recorder import StepRecord


class _Opaque:
    pass


def test_untrack_tree_untracks_plain_trees_bottom_up_only():
    plain = {"input_args": [{"type": "torch.Tensor", "shape": [3, 4], "Max": 1.0}, None, (1, "a")],
             "input_kwargs": {"k": [True, 2.5]}, "output": []}
    assert gc.is_tracked(plain) and gc.is_tracked(plain["input_args"][0])
    assert untrack_tree(plain)
    assert not gc.is_tracked(plain) and not gc.is_tracked(plain["input_args"][0])
    assert not gc.is_tracked(plain["input_kwargs"]["k"])
    assert plain["input_args"][0]["shape"] == [3, 4]          # the values themselves are untouched
    # something that is not a plain value keeps itself and its ancestors tracked; its plain siblings do not
    mixed = {"a": [_Opaque()], "b": [1, 2]}
    assert not untrack_tree(mixed)
    assert gc.is_tracked(mixed) and gc.is_tracked(mixed["a"]) and not gc.is_tracked(mixed["b"])
    # a tree deeper than the limit is left to the collector
    deep = [1]
    for _ in range(40):
        deep = [deep]
    assert not untrack_tree(deep) and gc.is_tracked(deep)
    # a dict taken out is taken back in by CPython itself when a tracked value is put in it later
    d = {"x": [1]}
    untrack_tree(d)
    d["y"] = [_Opaque()]
    assert gc.is_tracked(d)


def test_step_record_entries_are_untracked_and_reference_counting_frees_them():
    rec = StepRecord(0)
    entry = {"input": [{"type": "int", "value": 3}], "output": [None]}
    rec.add_entry("Functional.linear.0.backward", entry)
    assert rec.entries["Functional.linear.0.backward"] is entry and not gc.is_tracked(entry)
    import weakref

    class Probe(dict):
        pass

    probe = Probe(a=[1])         # a dict subclass is not a plain value: it stays tracked, and is freed anyway
    ref = weakref.ref(probe)
    rec.add_entry("x", {"v": [probe]})
    del probe
    rec.entries.clear()
    assert ref() is None


def test_real_training_records_are_untracked(tmp_path, monkeypatch):
    from tbprobe.collector import recorder

    seen = []
    original = recorder.StepRecord.add_entry

    def spy(self, name, entry):
        original(self, name, entry)
        seen.append(gc.is_tracked(entry))

    monkeypatch.setattr(recorder.StepRecord, "add_entry", spy)
    dbg = make_debugger(tmp_path, level="mix")
    train(dbg, "gpt", 1)
    dbg.close()
    # every forward, backward and parameter-gradient record of a real step: plain values only
    assert len(seen) > 50 and not any(seen)


def test_a_place_given_up_takes_the_pseudo_node_it_brought_and_nothing_else():
    """An asynchronous call under the optimizer that never completes in its step gives its place up: construct.json
    has no empty `optimizer` node then (a pseudo node comes only with a call recorded under it), but keeps one that
    another call holds, and the entries keep a record that came."""
    alone = StepRecord(0)
    alone.reserve("Distributed.all_reduce.0.forward", "optimizer", True)
    assert list(alone.construct) == ["optimizer", "Distributed.all_reduce.0.forward"]
    alone.unreserve("Distributed.all_reduce.0.forward", construct=True)
    assert alone.construct == {} and alone.entries == {}

    shared = StepRecord(0)
    shared.reserve("Distributed.all_reduce.0.forward", "optimizer", True)
    shared.add_construct("Torch.add.0.forward", "optimizer")
    shared.add_entry("Torch.add.0.forward", {"input_args": [], "input_kwargs": {}, "output": []})
    shared.unreserve("Distributed.all_reduce.0.forward", construct=True)
    assert shared.construct == {"optimizer": None, "Torch.add.0.forward": "optimizer"}
    assert list(shared.entries) == ["Torch.add.0.forward"]
