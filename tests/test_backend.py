"""The Backend protocol: both engines are backends, ``flow.run`` dispatches through it,
and a backend's settings are its own (never silently dropped)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.backend import Backend
from tstate.engine.embedded import Embedded
from tstate.errors import ConfigurationError, GraphError
from tstate.metrics import Metrics


def word_count(words: list[list[str]]) -> tuple[ts.Dataflow, ts.Collected, Any]:
    flow = ts.Dataflow("wc")
    inp = flow.input("words")

    @flow.stateful(inp, key=lambda w: w, state=int)
    def count(n: int, w: str, ctx: ts.Context) -> int:
        ctx.emit((w, n + 1))
        return n + 1

    out = count.collect()
    for t, batch in enumerate(words):
        inp.advance_to(t)
        inp.send(batch)
    inp.close()
    return flow, out, count


batches = st.lists(st.lists(st.sampled_from("abcde"), max_size=6), max_size=5)


@settings(max_examples=25)
@given(batches, st.integers(1, 4))
def test_a_run_through_the_protocol_is_the_run_on_a_worker_count(words: list[list[str]], workers: int) -> None:
    flow, out, count = word_count(words)
    flow.run(workers=workers)
    want, state = out.by_time(), flow.state(count, format="dict")
    flow2, out2, count2 = word_count(words)
    engine = Embedded(workers)
    assert isinstance(engine, Backend)
    flow2.run(engine)
    assert out2.by_time() == want
    assert flow2.state(count2, format="dict") == engine.state(count2, format="dict") == state
    assert flow2.backend is engine and flow2.execution is engine.execution
    assert isinstance(flow2.metrics, Metrics) and flow2.metrics is engine.metrics
    # the reference model: a word's last count is how often it was sent
    flat = [w for b in words for w in b]
    assert state == {w: flat.count(w) for w in set(flat)}


def test_a_backend_keeps_its_own_settings(tmp_path: Any) -> None:
    flow, _, _ = word_count([["a"]])
    with pytest.raises(ConfigurationError, match="a backend takes its own settings"):
        flow.run(Embedded(2), checkpoint=str(tmp_path))
    with pytest.raises(ConfigurationError, match="max_workers"):
        flow.run(Embedded(2), max_workers=4)
    with pytest.raises(ConfigurationError, match="workers must be an integer >= 1 or a Backend, got 'two'"):
        flow.run("two")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="workers must be an integer >= 1, got 0"):
        Embedded(0)


def test_the_embedded_engine_reports_its_checkpoints_and_metrics(tmp_path: Any) -> None:
    engine = Embedded(2, checkpoint=ts.Checkpoints(str(tmp_path), every_epochs=1, mode="sync", retain=2))
    assert engine.checkpoints is None and engine.metrics.latencies() == []
    with pytest.raises(GraphError, match="has not run a dataflow"):
        engine.state(None)
    flow = ts.Dataflow("wc")
    inp = flow.input("words")
    flow.stateful(inp, key=lambda w: w, state=int)(lambda n, w, ctx: n + 1).collect()
    ex = engine.start(flow)
    for t, batch in enumerate([["a"], ["b"], ["a"], ["c"]]):
        inp.advance_to(t)
        inp.send(batch)
        ex.step_while(lambda: True)
    inp.close()
    ex.run()
    store = engine.checkpoints
    assert store is not None and store.retain == 2
    assert [m.time for m in store.manifests()] == [3, 4]  # one per epoch (the last at the end), the newest two kept
    assert [e for e, _ in engine.metrics.latencies()] == [0, 1, 2, 3]


def test_flow_state_without_a_run_is_refused() -> None:
    flow, _, count = word_count([])
    with pytest.raises(GraphError, match="has not started"):
        flow.state(count)
    with pytest.raises(GraphError, match="has not run on the embedded engine"):
        flow.read(count, "a")


def test_the_contract_loads_no_engine() -> None:
    """``import tstate`` and building a dataflow load no engine, operator runtime or
    Spark module (the contract imports none); running on a worker count loads the
    embedded engine then."""
    import subprocess
    import sys

    code = (
        "import sys, tstate as ts\n"
        "from tstate.backend import Backend, Rescaled, Strategy\n"
        "flow = ts.Dataflow('f'); inp = flow.input('i'); out = inp.map(lambda x: x).collect()\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.startswith(('tstate.engine', 'tstate.operators', 'tstate.spark')))\n"
        "before = loaded()\n"
        "inp.send([1]); inp.close(); flow.run(2)\n"
        "print(before, 'tstate.engine.embedded' in loaded(), out.records(), ts.Embedded.__module__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "True", "[1]", "tstate.engine.embedded"], done.stdout + done.stderr


def test_both_engines_rescale_with_one_strategy_type_and_default() -> None:
    import inspect

    from tstate.backend import DEFAULT_STRATEGY, Rescaled
    from tstate.migration.commands import Rescale
    from tstate.spark.backend import Backend as Spark

    for engine in (Embedded, Spark, Backend):
        sig = inspect.signature(engine.rescale)
        assert sig.parameters["strategy"].default == DEFAULT_STRATEGY, engine
        assert sig.return_annotation in (Rescaled, "Rescaled"), engine
    assert Rescale(2).strategy == DEFAULT_STRATEGY
    with pytest.raises(ConfigurationError, match="unknown migration strategy 'slow'"):
        Rescale(2, strategy="slow")  # type: ignore[arg-type]


def test_the_embedded_engine_rescale_is_typed_and_its_former_result_still_reads() -> None:
    from tstate.backend import Rescaled

    flow, out, count = word_count([["a", "b"], ["c"], ["a"], ["d"]])
    engine = Embedded(2, max_workers=4)
    ex = engine.start(flow)
    ex.step()
    with pytest.raises(ConfigurationError, match="unknown migration strategy"):
        engine.rescale(4, "slow")  # type: ignore[arg-type]
    r = engine.rescale(4, "all-at-once")
    assert isinstance(r, Rescaled) and r.workers == 4 and r.strategy == "all-at-once" and r.steps == 1
    assert list(r.schedule) == ["count"] and len(r.schedule["count"]) == 1
    with pytest.warns(DeprecationWarning, match="schedule"):
        assert r["count"] == list(r.schedule["count"])
    with pytest.warns(DeprecationWarning, match="steps"):
        assert int(r) == 1
    ex.run()
    assert sorted(engine.state(count, format="dict").items()) == [("a", 2), ("b", 1), ("c", 1), ("d", 1)]
    assert engine.metrics.moves  # the bins did move


def test_the_embedded_engine_start_and_state_give_the_contract_types() -> None:
    """``start`` returns a :class:`~tstate.backend.Started` (the execution), ``state`` a
    :class:`~tstate.backend.StateView`; both read as the reference model says."""
    from tstate.backend import Started, StateView

    words = [["a", "b"], ["a"], ["c", "a"]]
    flow, out, count = word_count(words)
    engine = Embedded(2)
    run = engine.start(flow)
    assert isinstance(run, Started) and run.name == "wc" and not run.finished
    assert run.metrics is engine.metrics
    assert run.wait(timeout=60.0) is True and run.finished and run.wait() is True
    view = engine.state(count)
    assert isinstance(view, StateView) and view.operator == "count"
    assert view.column_names == ["key", "value"] and view.num_rows == len(view) == 3
    assert sorted((r["key"], r["value"]) for r in view.to_pylist()) == [("a", 3), ("b", 1), ("c", 1)]
    assert view.to_arrow().equals(engine.state(count, format="arrow"))
    assert sorted(view.to_pandas()["key"]) == ["a", "b", "c"]
    with pytest.warns(DeprecationWarning, match="to_arrow"):
        assert view.num_columns == 2  # the former result, a pyarrow.Table, still reads


def test_an_embedded_run_stopped_runs_no_further() -> None:
    flow = ts.Dataflow("stop")
    inp = flow.input("i")
    out = inp.map(lambda x: x).collect()
    run = Embedded(1).start(flow)
    inp.send([1])
    assert run.wait(timeout=0.0) is False  # the input is open: not over (one step ran)
    run.stop()
    assert run.finished and run.wait() is True
    inp.send([2])
    inp.close()
    assert not run.step() and out.records() == [1]  # nothing runs after the stop
