"""``python -m tstate``: checkpoints listing / verify / state, plot-latency; outputs and exit codes."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
from attrs import define, field

from tstate.__main__ import main
from tstate.checkpoint.store import CheckpointStore
from tstate.metrics import Metrics
from tstate.state.bin import Bin
from tstate.state.payload import encode_bin
from tstate.checkpoint.delta import encode_delta
from tstate.types.codec import StateCodec
from tstate.types.schema import analyse


@define
class Route:
    flights: int = 0
    delays: list[int] = field(factory=list)


CODEC = StateCodec(Route)


@pytest.fixture
def ckpt(tmp_path) -> str:
    """Two checkpoints: ``track`` (4 bins) and ``count`` (2 bins)."""
    d = str(tmp_path / "ck")
    store = CheckpointStore(d, fsync=False)
    w = store.begin(10)
    w.put_operator_schema("track", analyse(Route).to_builtins(), 4)
    w.put_operator_schema("count", analyse(int).to_builtins(), 2)
    b = Bin(1)
    b.states = {("ATL", "SFO"): Route(2, [5, 7]), "JFK": Route(1, [0])}
    b.timers = {24: {"JFK": None}}
    w.put_snapshot("track", 1, encode_bin(b, CODEC))
    c = Bin(0)
    c.states = {7: 3}
    w.put_snapshot("count", 0, encode_bin(c, StateCodec(int)))
    w.put_meta("sources", {"flights": 100})
    w.commit()
    w = store.begin(20)
    w.put_delta("track", 1, encode_delta(1, [(("ATL", "SFO"), CODEC.to_builtins(Route(3, [5, 7, 9])))], ["JFK"], {}, CODEC.fingerprint))
    w.put_snapshot("track", 3, encode_bin(Bin(3), CODEC))
    w.commit()
    return d


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list(ckpt, capsys) -> None:
    code, out, err = run(capsys, "checkpoints", ckpt)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["id", "time", "created", "size", "files", "operators"]
    assert lines[2].split()[:2] == ["1", "10"] and lines[3].split()[:2] == ["2", "20"]
    assert "count:2 bins (1 with state), track:4 bins (1 with state)" in lines[2]
    assert "track:4 bins (2 with state)" in lines[3]
    assert lines[-1] == f"2 checkpoints in {ckpt}"


def test_list_csv(ckpt, capsys) -> None:
    code, out, _ = run(capsys, "checkpoints", ckpt, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["id"] for r in rows] == ["1", "2"]
    store = CheckpointStore(ckpt, readonly=True)
    ms = store.manifests()
    assert [int(r["size"]) for r in rows] == [m.total_size for m in ms]
    assert [int(r["files"]) for r in rows] == [2, 4]


def test_verify_ok_and_problems(ckpt, capsys) -> None:
    code, out, _ = run(capsys, "checkpoints", ckpt, "--verify")
    assert code == 0 and "all files verified" in out and out.count(" ok") == 2
    store = CheckpointStore(ckpt, readonly=True)
    victim = store.bin_chain(store.manifests()[-1], "track", 1)[-1]  # the delta of checkpoint 2
    path = os.path.join(ckpt, victim.path)
    data = bytearray(open(path, "rb").read())
    data[5] ^= 1
    open(path, "wb").write(bytes(data))
    with open(os.path.join(ckpt, "manifests", "ckpt-000003.manifest"), "wb") as f:
        f.write(b"TSTCKPT1torn")
    code, out, _ = run(capsys, "checkpoints", ckpt, "--verify")
    assert code == 1
    assert "1 problem" in out.splitlines()[3]  # checkpoint 2's row
    assert f"checkpoint 2: {victim.path}: checksum mismatch" in out
    assert "manifests/ckpt-000003.manifest: torn manifest (only 12 bytes)" in out
    # without --verify: listed, the torn manifest is a warning, exit 0
    code, out, err = run(capsys, "checkpoints", ckpt)
    assert code == 0 and "warning: manifests/ckpt-000003.manifest" in err


def test_state_table_latest(ckpt, capsys) -> None:
    code, out, _ = run(capsys, "checkpoints", ckpt, "--state", "track")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["bin", "key", "state", "timers"]
    assert lines[2].split(None, 2)[:2] == ["1", '["ATL",'] and '{"flights": 3, "delays": [5, 7, 9]}' in lines[2]
    assert len(lines) == 4  # header, rule, one row, summary (JFK deleted, bin 3 empty)
    assert lines[-1] == "operator 'track' at checkpoint 2 (time 20): 1 keys, 0 timers in 2 of 4 bins"


def test_state_csv_at_older_checkpoint(ckpt, capsys) -> None:
    code, out, _ = run(capsys, "checkpoints", ckpt, "--state", "track", "--at", "1", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["bin"], json.loads(r["key"]), json.loads(r["state"]), json.loads(r["timers"])) for r in rows] == [
        ("1", ["ATL", "SFO"], {"flights": 2, "delays": [5, 7]}, []),
        ("1", "JFK", {"flights": 1, "delays": [0]}, [24]),
    ]
    code, out, _ = run(capsys, "checkpoints", ckpt, "--state", "count", "--at", "1", "--format", "csv")
    assert code == 0 and list(csv.reader(io.StringIO(out)))[1] == ["0", "7", "3", "[]"]


def test_state_errors(ckpt, capsys, tmp_path) -> None:
    code, _, err = run(capsys, "checkpoints", ckpt, "--state", "nope")
    assert code == 1 and "checkpoint 2 has no operator 'nope' (it has: count, track)" in err
    code, _, err = run(capsys, "checkpoints", ckpt, "--state", "track", "--at", "9")
    assert code == 1 and err == (
        f"error: no checkpoint 9 in {ckpt} (manifests/ckpt-000009.manifest: missing); "
        "the checkpoints there are 1 (time 10), 2 (time 20)\n"
    )  # was only "manifests/ckpt-000009.manifest: missing"
    code, _, err = run(capsys, "checkpoints", ckpt, "--at", "1")
    assert code == 2 and "--at needs --state" in err
    code, _, err = run(capsys, "checkpoints", str(tmp_path / "missing"))
    assert code == 1 and "does not exist" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "checkpoints", str(empty), "--state", "track")
    assert code == 1 and "not a checkpoint directory" in err
    (empty / "manifests").mkdir()  # a store that never committed
    code, _, err = run(capsys, "checkpoints", str(empty), "--state", "track")
    assert code == 1 and "no good checkpoint" in err
    code, _, err = run(capsys, "checkpoints", ckpt, "--format", "xml")
    assert code == 2 and "invalid choice" in err
    code, _, _ = run(capsys)
    assert code == 2


def test_a_directory_that_is_no_checkpoint_directory(tmp_path, capsys) -> None:
    """Was "0 checkpoints in DIR", exit 0."""
    (tmp_path / "src").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    for extra in ([], ["--verify"]):
        code, out, err = run(capsys, "checkpoints", str(tmp_path), *extra)
        assert (code, out) == (1, "")
        assert err == f"error: {tmp_path}: not a checkpoint directory (it has no manifests/ or data/)\n"


def test_times_are_shown_in_the_sources_epoch_unit(tmp_path, capsys) -> None:
    """A dataflow reading dates in hourly epochs: the checkpoints' times are listed as
    the hours they stand for (the manifest records the source's epoch unit), with the
    raw epoch beside them; the state's timers too."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    import tstate as ts

    start = dt.datetime(2001, 1, 1, 6)
    rows = [{"date": start + dt.timedelta(minutes=20 * i), "origin": "ATL" if i % 2 else "BOS"} for i in range(30)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "f.parquet")
    flow = ts.Dataflow("hours")
    flights = flow.source(ts.io.parquet(str(tmp_path / "f.parquet"), time="date", epoch="1h"), name="flights")

    @flow.stateful(flights, key=lambda r: r["origin"], state=int, name="count")
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        ctx.notify_at(ctx.time + 24)
        return n + 1

    count.on_notify(lambda n, t, ctx: None)
    ck = str(tmp_path / "ck")
    # sync: which checkpoints exist must not depend on the load (async ones may be skipped)
    flow.run(checkpoint=ts.Checkpoints(ck, every_epochs=4, mode="sync"))
    store = CheckpointStore(ck, readonly=True)
    assert store.latest().meta["epoch_unit"] == {"size": 3600.0, "dates": True}
    code, out, _ = run(capsys, "checkpoints", ck)
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["id", "time", "epoch", "created", "size", "files", "operators"]
    epoch = 271758  # 2001-01-01 06:00 in hours since 1970
    times = [ln.split()[1:4] for ln in lines[2:-1]]
    assert times and all(t[:2] == ["2001-01-01", f"{int(t[2]) - epoch + 6:02d}:00"] for t in times)
    code, out, _ = run(capsys, "checkpoints", ck, "--state", "count", "--format", "csv")
    timers = {json.loads(r["key"]): sorted(json.loads(r["timers"])) for r in csv.DictReader(io.StringIO(out))}
    due = [f"2001-01-02 {h:02d}:00" for h in range(6, 16)]  # each hour's records set one a day later
    assert timers == {"ATL": due, "BOS": due}


def test_help_gives_the_exit_codes(capsys) -> None:
    for argv in (["--help"], ["checkpoints", "--help"]):
        code, out, _ = run(capsys, *argv)
        text = " ".join(out.split())
        assert code == 0 and "exit status: 0 success; 1 a problem found, bad data or a runtime error" in text
        assert "2 a usage error" in text


def test_state_of_a_corrupt_file_names_it(ckpt, capsys) -> None:
    store = CheckpointStore(ckpt, readonly=True)
    ref = store.bin_chain(store.manifests()[0], "count", 0)[0]
    os.unlink(os.path.join(ckpt, ref.path))
    code, _, err = run(capsys, "checkpoints", ckpt, "--state", "count", "--at", "2")
    assert code == 1 and f"{ref.path}: missing" in err
    assert not os.path.exists(os.path.join(ckpt, ref.path))  # nothing written by the CLI


def test_plot_latency(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    m = Metrics()
    m.closed_at = {0: 1.0, 1: 2.0, 2: 3.0}
    m.done_at = {0: 1.01, 1: 2.5, 2: 3.002}
    run_a = tmp_path / "async.json"
    run_a.write_text(m.to_json())
    png = tmp_path / "lat.png"
    code, out, _ = run(capsys, "plot-latency", str(run_a), str(run_a), "--out", str(png), "--title", "t")
    assert code == 0 and out.strip() == f"wrote {png} (2 series, 6 points)"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code, _, err = run(capsys, "plot-latency", str(bad), "--out", str(png))
    assert code == 1 and 'no "latencies" list' in err
    bad.write_text("not json")
    code, _, err = run(capsys, "plot-latency", str(bad), "--out", str(png))
    assert code == 1 and "cannot be read as JSON" in err
    code, _, err = run(capsys, "plot-latency", str(run_a))
    assert code == 2 and "--out" in err


def test_module_entry_point(ckpt) -> None:
    r = subprocess.run([sys.executable, "-m", "tstate", "checkpoints", ckpt, "--verify"], capture_output=True, text=True)
    assert r.returncode == 0 and "all files verified" in r.stdout
