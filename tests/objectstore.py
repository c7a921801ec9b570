"""A real S3-protocol server for the tests: moto's server on 127.0.0.1.

The ``s3`` fixture (session-scoped, in ``tests/conftest.py``) starts one
:class:`S3Server` on a free port, creates the bucket :data:`BUCKET`, points the
``AWS_*`` environment variables at it (what the checkpoint store's S3 client and the
processes the tests start read) and stops it at the end.  Its state lives in this
process, so :meth:`S3Server.stop` / :meth:`S3Server.start` make the store unreachable for
a while and bring it back with its objects.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any, Optional

BUCKET = "tstate-tests"
#: the bucket of :func:`start_locked_server`, which its IAM user may only read
LOCKED = "tstate-locked"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """moto's S3 server in a thread of this process, on ``127.0.0.1:port``."""

    def __init__(self, port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: Any = None

    def start(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request

        deadline = time.monotonic() + 20
        while True:
            try:
                self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
                self._server.start()
                break
            except OSError:  # the port is still in TIME_WAIT after a stop
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"moto did not listen on {self.endpoint}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def env(self) -> dict[str, str]:
        """The environment a client needs to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": "tstate-test",
            "AWS_SECRET_ACCESS_KEY": "tstate-test",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def url(self, name: str = "") -> str:
        """A fresh, unique ``s3://`` location in the test bucket."""
        return f"s3://{BUCKET}/{name or 'run'}-{uuid.uuid4().hex[:10]}"

    def keys(self, url: str) -> list[str]:
        """Every object key below ``url`` (relative to it), listed with boto3."""
        import boto3

        prefix = url.split(f"s3://{BUCKET}/", 1)[1].rstrip("/") + "/"
        client = boto3.client("s3", endpoint_url=self.endpoint)
        out: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            out.extend(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        return sorted(out)


def start_session_server() -> S3Server:
    """Start a server, export its environment, create :data:`BUCKET`."""
    import boto3

    server = S3Server()
    server.start()
    os.environ.update(server.env())
    boto3.client("s3", endpoint_url=server.endpoint).create_bucket(Bucket=BUCKET)
    return server


def start_locked_server() -> tuple[Any, str, str, str]:
    """A second moto server, in its own process, that checks credentials
    (``INITIAL_NO_AUTH_ACTION_COUNT``: only the first 4 requests go unchecked, the set-up
    below), with the bucket :data:`LOCKED` and an IAM user that may only read it.
    Returns the process, its endpoint and the user's access key id and secret."""
    import json
    import subprocess
    import sys

    import boto3

    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="4")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"moto did not listen on {endpoint}") from None
                time.sleep(0.1)
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=LOCKED)  # unchecked action 1
        iam = boto3.client("iam", endpoint_url=endpoint)
        iam.create_user(UserName="reader")  # 2
        policy = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": "*"}]}
        iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=json.dumps(policy))  # 3
        key = iam.create_access_key(UserName="reader")["AccessKey"]  # 4
    except BaseException:
        proc.kill()
        raise
    return proc, endpoint, key["AccessKeyId"], key["SecretAccessKey"]
