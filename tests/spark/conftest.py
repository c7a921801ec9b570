"""Spark backend tests: the ``spark`` fixture is in ``tests/conftest.py``."""

from __future__ import annotations

import pytest

pyspark = pytest.importorskip("pyspark", reason="the Spark backend tests need the spark extra")


@pytest.fixture(autouse=True)
def _fresh_cache():  # type: ignore[no-untyped-def]
    """Executor caches live in the Python workers; the driver-side one (local tasks) is
    cleared so tests do not see each other's bins."""
    from tstate.spark import binstore

    binstore.clear()
    yield


@pytest.fixture(autouse=True)
def _staged(staged: None) -> None:
    """These tests check the staged paths (tests/conftest.py ``staged``); the one-task
    path of small batches is tests/spark/test_local_batch.py's."""
