"""State queries: consistent snapshots while running and after, as Arrow / pandas /
dicts; point reads; wrongly typed state values are caught with key and field path."""

from __future__ import annotations

import pytest
from attrs import define, field

import tstate as ts
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.errors import StateQueryError, StateTypeError


@define
class Route:
    flights: int = 0
    delays: list[int] = field(factory=list)


def build():
    flow = ts.Dataflow("routes")
    inp = flow.input("flights")

    @flow.stateful(inp, key=lambda f: f[0], state=Route, bins=16)
    def track(route: Route, f, ctx) -> None:
        route.flights += 1
        route.delays.append(f[1])

    return flow, inp, track, track.probe()


def test_snapshot_while_running_at_completed_times():
    flow, inp, track, probe = build()
    ex = flow.start(workers=3)
    inp.send([("ATL", 5), ("SFO", 7)])
    inp.advance_to(1)
    ex.step_while(lambda: probe.less_than(1))
    view = flow.state(track)  # latest consistent time: 1
    assert view.time == 1 and view.operator == "track"
    table = flow.state(track, format="arrow")
    assert view.to_arrow().equals(table) and table.schema.metadata[b"tstate.time"] == b"1"
    with pytest.warns(DeprecationWarning, match="to_arrow"):  # the former result, a pyarrow.Table, still reads
        assert view.schema.metadata[b"tstate.time"] == b"1"
    rows = sorted(view.to_pylist(), key=lambda r: r["key"])
    assert rows == [{"key": "ATL", "flights": 1, "delays": [5]}, {"key": "SFO", "flights": 1, "delays": [7]}]
    inp.send([("ATL", 9)])
    ex.step()  # epoch 1 is applied but not complete: no consistent snapshot right now
    with pytest.raises(StateQueryError, match="time 1 is not complete"):
        flow.state(track)
    inp.advance_to(2)
    ex.step_while(lambda: probe.less_than(2))
    with pytest.raises(StateQueryError, match="already includes time 1.*latest consistent time is 2"):
        flow.state(track, at=1)
    df = flow.state(track, at=2, format="pandas")
    assert dict(zip(df["key"], df["flights"])) == {"ATL": 2, "SFO": 1}
    assert flow.read(track, "ATL") == Route(2, [5, 9])
    assert flow.read(track, "nowhere") is None
    inp.close()
    ex.run()
    assert flow.state(track, format="dict") == {"ATL": Route(2, [5, 9]), "SFO": Route(1, [7])}


def test_queries_need_a_stateful_operator_and_a_start():
    flow, inp, track, probe = build()
    with pytest.raises(ts.errors.GraphError, match="has not started"):
        flow.state(track)
    m = inp.map(lambda x: x)
    flow.start()
    with pytest.raises(StateQueryError, match="not a stateful operator"):
        flow.state(m)


def test_wrongly_typed_state_is_caught_with_key_and_path(tmp_path):
    flow = ts.Dataflow("bad")
    inp = flow.input("in")

    @flow.stateful(inp, key=lambda r: r, state=Route, name="track")
    def track(route: Route, r, ctx) -> None:
        route.delays.append("late" if r == "LAX" else 1)

    inp.send(["ATL", "LAX"])
    inp.close()
    flow.run()
    with pytest.raises(StateTypeError, match=r"Route.delays\[0\].*str"):
        flow.state(track)
    # and at the latest when a checkpoint encodes the bin, naming the operator and key
    flow2 = ts.Dataflow("bad2")
    inp2 = flow2.input("in")
    flow2.stateful(inp2, key=lambda r: r, state=Route, name="track")(lambda route, r, ctx: route.delays.append("x"))
    ex = flow2.start(checkpoint=Checkpoints(str(tmp_path), every_epochs=1, mode="sync"))
    inp2.send(["LAX"])
    inp2.advance_to(5)
    with pytest.raises(StateTypeError, match=r"operator 'track', key 'LAX': Route.delays\[0\]"):
        ex.step_while(lambda: True)
