"""Bad input to the engine: every mistake is a tstate error naming operator and time,
and the engine never hangs."""

from __future__ import annotations

import pytest

import tstate as ts
from tstate.errors import (
    CapabilityLeakError,
    GraphError,
    InputClosedError,
    InputError,
    KeyFunctionError,
    OperatorError,
    ProgressError,
)


def test_advance_to_backwards():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    inp.advance_to(5)
    with pytest.raises(ProgressError, match=r"input 'nums'.*backwards from 5 to 3"):
        inp.advance_to(3)


def test_send_before_current_epoch():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    inp.advance_to(5)
    with pytest.raises(ProgressError, match=r"input 'nums'.*time 2"):
        inp.send([1], time=2)


def test_send_and_advance_after_close():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    inp.close()
    with pytest.raises(InputClosedError, match="nums"):
        inp.send([1])
    with pytest.raises(InputClosedError, match="nums"):
        inp.advance_to(3)


def test_user_function_raising_names_operator_worker_and_time():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    inp.map(lambda x: 1 // x, name="invert").collect()
    inp.advance_to(7)
    inp.send([1, 0])
    inp.close()
    with pytest.raises(OperatorError, match=r"operator 'invert' on worker 0 at time 7 raised ZeroDivisionError") as e:
        flow.run()
    assert isinstance(e.value.__cause__, ZeroDivisionError)


def test_downgrade_backwards_is_an_error():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")

    @flow.unary_frontier(inp, state=list)
    def keeper(i, out, ctx):
        for cap, _ in i:
            c = cap.retain()
            c.downgrade(cap.time + 3)
            c.downgrade(cap.time + 1)

    inp.advance_to(2)
    inp.send([1])
    inp.close()
    with pytest.raises(ProgressError, match=r"'keeper'.*downgrade.*5.*earlier time 3"):
        flow.run()


def test_delayed_to_earlier_time_is_an_error():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")

    @flow.unary_frontier(inp)
    def early(i, out, ctx):
        for cap, batch in i:
            out.give_many(cap.delayed(cap.time - 1), batch)

    inp.advance_to(4)
    inp.send([1])
    inp.close()
    with pytest.raises(ProgressError, match=r"'early'.*delay.*4.*earlier time 3"):
        flow.run()


def test_input_capability_used_after_activation():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    saved = []

    @flow.unary_frontier(inp)
    def stale(i, out, ctx):
        for cap, batch in i:
            saved.append(cap)
        if len(saved) == 2:
            out.give(saved[0], 1)

    ex = flow.start()
    inp.send([1])
    ex.step()
    inp.advance_to(1)
    inp.send([2])
    with pytest.raises(ProgressError, match="used after its activation ended"):
        ex.run()


def test_notify_without_capability():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")

    @flow.unary_frontier(inp)
    def bad(i, out, ctx):
        for cap, _ in i:
            pass
        ctx.notify_at(3)

    inp.close()
    with pytest.raises(ProgressError, match=r"'bad'.*no capability.*time 3"):
        flow.run()


def test_open_input_at_run_is_reported_not_a_hang():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    inp.map(lambda x: x).collect()
    inp.send([1])
    with pytest.raises(CapabilityLeakError, match=r"input 'nums' \(at time 0\) is still open"):
        flow.run()


def test_leaked_capability_is_reported():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")

    @flow.unary_frontier(inp, state=list)
    def hoarder(i, out, ctx):
        for cap, _ in i:
            ctx.state.append(cap.retain())  # kept forever

    inp.advance_to(3)
    inp.send([1])
    inp.close()
    with pytest.raises(CapabilityLeakError, match=r"'hoarder' on worker 0 holds capabilities at \[3\]"):
        flow.run()


def test_unconnected_feedback_is_a_graph_error():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    with pytest.raises(GraphError, match="never connected"):

        @flow.iterate(inp)
        def loop(scope, nums):
            scope.feedback(name="fb")
            return nums


def test_mixing_scopes_is_a_graph_error():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    with pytest.raises(GraphError, match="different scopes"):

        @flow.iterate(inp)
        def loop(scope, nums):
            return nums.concat(inp)


def test_feedback_must_advance_and_needs_a_scope():
    flow = ts.Dataflow("f")
    with pytest.raises(GraphError, match="iterate scope"):
        flow.root.feedback()
    inp = flow.input("nums")
    with pytest.raises(GraphError, match="step must be >= 1"):

        @flow.iterate(inp)
        def loop(scope, nums):
            scope.feedback(step=0)


def test_duplicate_operator_names():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    inp.map(lambda x: x, name="m")
    with pytest.raises(GraphError, match="two operators are named 'm'"):
        inp.map(lambda x: x, name="m")


def test_key_function_errors_name_record_and_time():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    inp.exchange(lambda r: r["k"], name="by_k").collect()
    inp.advance_to(2)
    inp.send([{"k": 1}, {"x": 2}])
    inp.close()
    with pytest.raises(KeyFunctionError, match=r"'by_k'.*KeyError.*\{'x': 2\}.*time 2"):
        flow.run(workers=2)


def test_unhashable_key():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    inp.exchange(lambda r: r, name="by_r").collect()
    inp.send([[1, 2]])
    inp.close()
    with pytest.raises(KeyFunctionError, match=r"'by_r'.*\[1, 2\]"):
        flow.run(workers=2)


def test_no_operators_after_start():
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    flow.start()
    with pytest.raises(GraphError, match="after the dataflow started"):
        inp.map(lambda x: x)


def test_bad_worker_count():
    flow = ts.Dataflow("f")
    flow.input("nums").close()
    with pytest.raises(ts.errors.ConfigurationError, match="workers"):
        flow.run(workers=0)


@pytest.mark.parametrize("batch", ["abc", b"abc", bytearray(b"ab"), {"a": 1}, 5])
def test_send_of_something_that_is_not_a_batch_is_refused(batch):
    """A str is not a batch of records: it is refused (not split into characters)."""
    flow = ts.Dataflow("f")
    inp = flow.input("words")
    out = inp.collect()
    with pytest.raises(InputError, match=rf"input 'words': send\(.*\): a {type(batch).__name__} is not a batch of records"):
        inp.send(batch)
    inp.send(["abc"])  # one record
    inp.close()
    flow.run()
    assert out.records() == ["abc"]


@pytest.mark.parametrize("bad", [2.5, "7", (1, 2), ts.Product(1, 0), True, None])
def test_times_given_to_an_input_are_int_epochs(bad):
    flow = ts.Dataflow("f")
    inp = flow.input("nums")
    with pytest.raises(InputError, match=rf"input 'nums': advance_to\(.*\): an input's times are int epochs, not {type(bad).__name__}"):
        inp.advance_to(bad)
    if bad is not None:  # (None: "the current epoch")
        with pytest.raises(InputError, match=r"input 'nums': send at time\("):
            inp.send([1], time=bad)
    assert inp.time == 0
    import numpy as np

    inp.advance_to(np.int64(3))  # numpy integers are ints
    out = inp.collect()
    inp.send([1], time=np.int32(4))
    inp.close()
    flow.run()
    assert out.by_time() == {4: [1]} and type(inp.time) is int


def test_a_source_batch_time_must_be_an_int_epoch():
    flow = ts.Dataflow("f")
    flow.source(ts.io.from_batches([(0, [1]), (1.5, [2])]), name="src").collect()
    with pytest.raises(ts.errors.SourceError, match=r"source 'src': a batch at time 1.5: a source's times are int epochs"):
        flow.run()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_nan_key_is_refused_naming_the_record(workers):
    flow = ts.Dataflow("f")
    inp = flow.input("nums")

    @flow.stateful(inp, key=lambda r: r["x"], state=int)
    def count(n, r, ctx):
        return n + 1

    inp.send([{"x": 1.5}, {"x": float("nan")}, {"x": ("a", float("nan"))}])
    inp.close()
    with pytest.raises(KeyFunctionError, match=r"operator 'count': record \{'x': nan\} at time 0: key nan: NaN is not equal to itself"):
        flow.run(workers=workers)
