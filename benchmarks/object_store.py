"""Small-file throughput of the two object-store clients the checkpoint store could use:
``pyarrow.fs`` (``S3FileSystem``) and ``fsspec`` (``s3fs``), against one local S3 server.

A checkpoint writes many small files (a bin's delta is a few KiB) and one manifest, and
recovery reads them back, so what matters is the cost per request, not bandwidth.  A
moto S3 server runs in its own process on 127.0.0.1 (the clients alone in this one);
each client PUTs ``--files`` objects of each size, GETs them back, lists the prefix and
deletes them.  The clients run round-robin (``--repeat`` rounds; medians), so noise hits
both alike.  The absolute numbers are moto's (a Python server: every request costs it
far more than a real S3 would), the ratios are what the choice rests on.

    python -m benchmarks.object_store [--files 200] [--repeat 3] [--sizes 1024,65536]

Needs ``moto[server]`` (the test extra) and ``s3fs`` (the bench extra).

Found on the way (pyarrow 26): ``pyarrow.fs.S3FileSystem`` reads ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION``, but ``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_S3`` only through ``FileSystem.from_uri`` (a bare ``S3FileSystem()``
goes to AWS); without ``allow_delayed_open=True`` every small write is a three-request
multipart upload (which moto's answer to CompleteMultipartUpload also trips up); a read
is HEAD + GET, and a delete is HEAD + DELETE + a PUT re-creating the parent "directory"
marker.  s3fs makes one request for each (with ``max_concurrency=1``: otherwise a read
HEADs first), and can send ``If-None-Match: *`` (``pipe_file(mode="create")``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

from benchmarks.common import table

BUCKET = "tstate-bench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    """A moto S3 server in a child process; returns it and its endpoint URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the moto server did not start")


class PyArrowClient:
    """The operations the checkpoint store does, through ``pyarrow.fs``."""

    name = "pyarrow.fs"
    prefix = "pyarrow"

    def __init__(self) -> None:
        from pyarrow import fs

        # single PUT per small file (without it every write is a 3-request multipart upload)
        self.fs = fs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"], allow_delayed_open=True)
        self._fs = fs

    def put(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(f"{BUCKET}/{key}") as f:
            f.write(data)

    def get(self, key: str) -> bytes:
        with self.fs.open_input_stream(f"{BUCKET}/{key}") as f:
            return f.read()

    def list(self, prefix: str) -> int:
        infos = self.fs.get_file_info(self._fs.FileSelector(f"{BUCKET}/{prefix}", recursive=False))
        return sum(i.type == self._fs.FileType.File for i in infos)

    def delete(self, key: str) -> None:
        self.fs.delete_file(f"{BUCKET}/{key}")


class FsspecClient:
    """The same through ``fsspec`` / ``s3fs`` (listings uncached, as the store needs)."""

    name = "fsspec (s3fs)"
    prefix = "fsspec"

    def __init__(self) -> None:
        import s3fs

        # as tstate.checkpoint.objectfs configures it: a GET is one request
        self.fs = s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True, max_concurrency=1)

    def put(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(f"{BUCKET}/{key}", data)

    def get(self, key: str) -> bytes:
        return bytes(self.fs.cat_file(f"{BUCKET}/{key}"))

    def list(self, prefix: str) -> int:
        self.fs.invalidate_cache()
        return sum(e["type"] == "file" for e in self.fs.ls(f"{BUCKET}/{prefix}", detail=True))

    def delete(self, key: str) -> None:
        self.fs.rm_file(f"{BUCKET}/{key}")


def _round(client: Any, files: int, size: int, tag: str) -> dict[str, float]:
    """Seconds per operation kind for ``files`` objects of ``size`` bytes."""
    payload = os.urandom(size)
    tag = f"{client.prefix}/{tag}"  # each client its own prefix (pyarrow leaves directory markers)
    keys = [f"{tag}/{i:06d}.bin" for i in range(files)]
    out: dict[str, float] = {}

    def timed(what: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        r = fn()
        out[what] = time.perf_counter() - t0
        return r

    timed("put", lambda: [client.put(k, payload) for k in keys])
    got = timed("get", lambda: [client.get(k) for k in keys])
    assert all(g == payload for g in got), f"{client.name}: read back different bytes"
    n = timed("list", lambda: client.list(tag))
    assert n == files, f"{client.name}: listed {n} of {files}"
    timed("delete", lambda: [client.delete(k) for k in keys])
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--sizes", default="1024,65536")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    proc, endpoint = start_server()
    try:
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1",
            AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint,
        )
        import boto3

        boto3.client("s3").create_bucket(Bucket=BUCKET)
        clients = [PyArrowClient(), FsspecClient()]
        times: dict[tuple[str, int, str], list[float]] = {}
        for client in clients:  # warm up (connections, credential lookup)
            _round(client, 10, 16, "warmup")
        for r in range(args.repeat):
            for size in sizes:
                for client in clients:
                    for op, t in _round(client, args.files, size, f"r{r}-{size}").items():
                        times.setdefault((client.name, size, op), []).append(t)
    finally:
        proc.terminate()
        proc.wait(10)

    rows, ratios = [], {}
    for size in sizes:
        for op in ("put", "get", "list", "delete"):
            med = {c.name: statistics.median(times[c.name, size, op]) for c in clients}
            a, f = med["pyarrow.fs"], med["fsspec (s3fs)"]
            unit = 1 if op == "list" else args.files
            rows.append([f"{size // 1024} KiB", op, unit / a, unit / f, f / a])
            ratios[f"{op}_{size // 1024}k_pyarrow_over_fsspec"] = round(f / a, 2)
    print(f"moto S3 server on 127.0.0.1, {args.files} files per size, median of {args.repeat} rounds (interleaved)")
    print(table(["size", "op", "pyarrow.fs ops/s", "fsspec ops/s", "pyarrow speed-up"], rows))
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
