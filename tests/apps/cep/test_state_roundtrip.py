"""The per-key state is plain typed data: encoding it with cattrs + msgpack and decoding
it between any two events (what checkpointing and migration do) changes nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import cattrs
import msgpack
import pytest
from hypothesis import given, note

from apps.cep import KeyState, Matcher
from apps.cep.flights import Flight, delay_cascade, recovery, time_minutes
from tests.apps.cep.helpers import check_state, drive, results, timeout_set
from tests.apps.cep.strategies import Event, pattern_specs, streams

converter = cattrs.Converter()
converter.register_unstructure_hook(dt.datetime, lambda d: d.isoformat())
converter.register_structure_hook(
    dt.datetime, lambda s, _: dt.datetime.fromisoformat(s)
)


def roundtrip(state: KeyState, state_type: Any) -> KeyState:
    data = msgpack.packb(converter.unstructure(state, state_type), use_bin_type=True)
    back = converter.structure(
        msgpack.unpackb(data, raw=False, strict_map_key=False), state_type
    )
    assert back == state
    return back


@given(pattern_specs(), streams())
def test_roundtrip_between_events(spec, stream) -> None:
    note(repr(spec))
    pattern = spec.build()
    end = (stream[-1][1] if stream else 0) + 10

    def between(m: Matcher, st: KeyState) -> KeyState:
        back = roundtrip(st, m.state_type)
        check_state(back)
        return back

    got = drive(Matcher(pattern, event_type=Event), stream, end, between=between)
    want = drive(pattern, stream, end)
    assert results(got) == results(want)
    assert timeout_set(got) == timeout_set(want)


def _flights(delays: list[int], minutes: int = 10) -> list[tuple[Flight, int]]:
    t0 = dt.datetime(2001, 1, 1)
    out = []
    for i, d in enumerate(delays):
        f = Flight(t0 + dt.timedelta(minutes=minutes * i), d, 500, "ATL", "ORD")
        out.append((f, time_minutes(f)))
    return out


@pytest.mark.parametrize("make", [delay_cascade, recovery])
def test_roundtrip_flight_state(make) -> None:
    delays = [
        45,
        10,
        50,
        0,
        70,
        90,
        -5,
        65,
        40,
        80,
        85,
        0,
        31,
        32,
        33,
        120,
        -1,
        70,
        200,
    ]
    stream = _flights(delays)
    end = stream[-1][1] + 1000
    m = Matcher(make(), event_type=Flight)
    got = drive(m, stream, end, between=lambda m, st: roundtrip(st, m.state_type))
    want = drive(make(), stream, end)
    assert results(got) == results(want) and got.matches


def test_roundtrip_with_tstate_codec() -> None:
    """The project's own state codec (cattrs + msgpack, checked) takes the state type."""
    codec_mod = pytest.importorskip("tstate.types.codec")
    StateCodec = getattr(codec_mod, "StateCodec", None)
    if StateCodec is None:
        pytest.skip("tstate.types.codec has no StateCodec")
    m = Matcher(delay_cascade(), event_type=Flight)
    codec = StateCodec(m.state_type)
    st = m.new_state()
    for f, t in _flights([45, 10, 50, 60, 5, 70, 80, 31, 40]):
        m.process(st, f, t)
        st = codec.decode(codec.encode(st))
        check_state(st)
    assert st.runs and st.nodes
