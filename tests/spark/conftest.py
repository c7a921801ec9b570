"""One SparkSession for the whole test run (``local[2]``: starting Spark takes seconds)."""

from __future__ import annotations

import pytest

pyspark = pytest.importorskip("pyspark", reason="the Spark backend tests need the spark extra")


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from tstate.spark import local_session

    session = local_session("local[2]", app_name="tstate-tests")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _fresh_cache():  # type: ignore[no-untyped-def]
    """Executor caches live in the Python workers; the driver-side one (local tasks) is
    cleared so tests do not see each other's bins."""
    from tstate.spark import binstore

    binstore.clear()
    yield
