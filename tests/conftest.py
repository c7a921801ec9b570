"""Shared test configuration: hypothesis profiles.

``ci`` (selected by ``HYPOTHESIS_PROFILE=ci`` or ``CI=true``): no deadline, bounded
examples, so the suite is stable on a slow, shared machine.  ``dev``: the default
locally, also without a deadline.  ``thorough``: many more examples, for a deep run.
"""

from __future__ import annotations

import os

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
