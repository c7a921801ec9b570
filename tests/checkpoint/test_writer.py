"""The writer process: batches of files written atomically, acknowledged in order;
errors and a dead child fail the batches naming the files; closing reaps it."""

from __future__ import annotations

import os

import pytest

from tstate.engine.checkpointing.writer import FileWriter
from tstate.errors import CheckpointError


def test_batches_are_written_and_acknowledged(tmp_path) -> None:
    w = FileWriter(str(tmp_path))
    try:
        futures = [w.write([(f"data/op/{i}/f{j}.bin", bytes([i, j]) * 1000) for j in range(5)]) for i in range(20)]
        for f in futures:
            assert f.result(timeout=60) is None
        for i in range(20):
            for j in range(5):
                assert (tmp_path / f"data/op/{i}/f{j}.bin").read_bytes() == bytes([i, j]) * 1000
        assert not [n for _, _, ns in os.walk(tmp_path) for n in ns if ".tmp-" in n]  # renamed into place
    finally:
        w.close()
    assert w._proc.returncode == 0  # reaped


def test_a_file_that_cannot_be_written_fails_its_batch_naming_it(tmp_path) -> None:
    w = FileWriter(str(tmp_path))
    try:
        (tmp_path / "data").write_bytes(b"a file where a directory should be")
        bad = w.write([("data/op/0/x.bin", b"x")])
        with pytest.raises(CheckpointError, match=r"data/op/0/x\.bin: cannot be written"):
            bad.result(timeout=60)
        (tmp_path / "data").unlink()
        assert w.write([("data/op/0/y.bin", b"y")]).result(timeout=60) is None  # it goes on
    finally:
        w.close()


def test_a_dead_writer_fails_what_it_did_not_acknowledge(tmp_path) -> None:
    w = FileWriter(str(tmp_path))
    w.kill()
    f = w.write([("data/op/0/z.bin", b"z")])
    with pytest.raises(CheckpointError, match=r"data/op/0/z\.bin.*not written|writer process"):
        f.result(timeout=60)
    assert not w.alive
