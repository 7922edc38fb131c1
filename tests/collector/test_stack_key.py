"""stack_key (C) walks the same frames Python does and keys them by the same ints."""
import sys

import pytest

from tbprobe.collector._cstats import stack_key


def _python_key(frame, prefix):
    key = []
    while frame is not None:
        if not frame.f_code.co_filename.startswith(prefix):
            key += [id(frame.f_code), frame.f_lasti]
        frame = frame.f_back
    return tuple(key)


def _nested(n, prefix, own, codes):
    if n:
        return _nested(n - 1, prefix, own, codes)
    frame = sys._getframe()
    return stack_key(frame, own, prefix, codes), _python_key(frame, prefix)


@pytest.mark.parametrize("prefix", ["/nonexistent/", __file__])
def test_stack_key_matches_a_python_walk_and_leaves_out_own_frames(prefix):
    own, codes = {}, {}
    (got, expected), (again, _) = [_nested(5, prefix, own, codes) for _ in range(2)]   # one call site, twice
    # the same frames and offsets; only the innermost frame's offset differs, read at two different calls
    assert got[0] == expected[0] and got[2:] == expected[2:] and len(got) % 2 == 0
    if prefix == __file__:       # this file's frames are "own": left out, and remembered as such
        assert id(_nested.__code__) not in got[::2] and own[id(_nested.__code__)] is True
    else:
        assert got.count(id(_nested.__code__)) == 6
    assert all(codes[i].co_filename for i in got[::2])   # every code object kept alive, by id
    # own-ness is decided once per code object: the same frames again (the innermost offset may move between a
    # call's first runs, when CPython 3.11 specialises it; the stack's lines are what the interner compares)
    assert again[0] == got[0] and again[2:] == got[2:]


def test_stack_key_refuses_wrong_arguments():
    with pytest.raises(TypeError):
        stack_key(None, {}, "", {})
    with pytest.raises(TypeError):
        stack_key(sys._getframe(), [], "", {})


# A function written in Python hands itself to the operator mode through torch's handle_torch_function (a
# "dispatch frame": None in `own`), and the mode may run its body again; the frames of the first run, above the
# dispatch frame, repeat the codes of those just below it. _outer/_inner play F.max_pool2d's dispatcher and the
# function it picks (two frames repeated), _dispatch plays handle_torch_function.

def _outer(run, own, codes):
    return _inner(run, own, codes)


def _inner(run, own, codes):
    if run == 1:
        return _dispatch(own, codes)
    return stack_key(sys._getframe(), own, "/nonexistent/", codes)


def _dispatch(own, codes):
    return _outer(2, own, codes)


def _unrepeated(own, codes):
    return _dispatch_to_other(own, codes)


def _dispatch_to_other(own, codes):
    return stack_key(sys._getframe(), own, "/nonexistent/", codes)


def test_stack_key_leaves_out_the_frames_a_body_run_again_repeats():
    own, codes = {}, {}
    own[id(_dispatch.__code__)] = None
    key = _outer(1, own, codes)
    ids = key[::2]
    here = sys._getframe().f_code
    # the second run's two frames, then this test's: the dispatch frame and the first run's two are left out
    assert ids[:3] == (id(_inner.__code__), id(_outer.__code__), id(here))
    assert ids.count(id(_inner.__code__)) == 1 and ids.count(id(_outer.__code__)) == 1
    assert id(_dispatch.__code__) not in ids
    # a dispatch frame whose callers repeat nothing: only the dispatch frame itself is left out
    own[id(_dispatch_to_other.__code__)] = None
    key = _unrepeated(own, codes)
    assert key[::2][:2] == (id(_unrepeated.__code__), id(here))
