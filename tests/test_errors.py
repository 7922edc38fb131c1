import pickle

from tbprobe.errors import FormatError, TbprobeError


def test_format_error_names_file_line_and_problem():
    err = FormatError("run/dump.json", "truncated JSON", line=7)
    assert str(err) == "run/dump.json:7: truncated JSON"
    assert isinstance(err, TbprobeError)


def test_format_error_survives_a_trip_through_a_worker_process():
    # Process pools pickle exceptions to send them back; the default reduction would lose path and problem.
    err = pickle.loads(pickle.dumps(FormatError("rank0/stack.json", "not an object")))
    assert (err.path, err.problem, err.line) == ("rank0/stack.json", "not an object", None)
    assert str(err) == "rank0/stack.json: not an object"
