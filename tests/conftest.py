"""Shared test configuration: hypothesis profiles.

``ci`` (selected by ``HYPOTHESIS_PROFILE=ci`` or ``CI=true``): no deadline, bounded
examples, so the suite is stable on a slow, shared machine.  ``dev``: the default
locally, also without a deadline.  ``thorough``: many more examples, for a deep run.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "dev", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", deadline=None, max_examples=1000)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One SparkSession (``local[2]``) for the whole run: starting Spark takes seconds.
    Tests that use it are skipped where pyspark is not installed."""
    pytest.importorskip("pyspark", reason="the Spark backend tests need the spark extra")
    from tstate.spark import local_session

    session = local_session("local[2]", app_name="tstate-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3():  # type: ignore[no-untyped-def]
    """A moto S3 server on 127.0.0.1 with the bucket ``tstate-tests``, the ``AWS_*``
    environment variables pointing at it (``tests/objectstore.py``)."""
    pytest.importorskip("moto.server", reason="the object-store tests need moto[server] (the test extra)")
    pytest.importorskip("s3fs", reason="the object-store tests need s3fs (the objectstore extra)")
    from tests.objectstore import start_session_server

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                                           "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")}
    server = start_session_server()
    yield server
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def s3_locked(s3):  # type: ignore[no-untyped-def]
    """``(endpoint, key id, secret)`` of a moto server that checks credentials, whose
    bucket ``tstate-locked`` that user may read but not write (``tests/objectstore.py``)."""
    from tests.objectstore import start_locked_server

    proc, endpoint, key, secret = start_locked_server()
    yield endpoint, key, secret
    proc.terminate()
    proc.wait(10)


def pytest_ignore_collect(collection_path: Any, config: Any) -> Optional[bool]:
    """Doctests (``--doctest-modules``) are for ``tstate/`` and ``apps/``: the tests'
    helper modules are not collected on their own (``evil_records`` must stay
    unimported until a test asks for it)."""
    p = str(collection_path)
    if p.endswith(".py") and not os.path.basename(p).startswith(("test_", "conftest")):
        return True
    return None


@pytest.fixture
def staged(monkeypatch: Any) -> None:
    """Every micro-batch stage by stage (input stage, a shuffle per root boundary stage),
    however small: ``tstate.spark.local_batch`` would run the tests' small batches in one
    task.  Autouse where tests check the staged paths (tests/spark, tests/apps/cep)."""
    pytest.importorskip("pyspark", reason="the Spark backend tests need the spark extra")
    from tstate.spark import local_batch

    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", -1)
