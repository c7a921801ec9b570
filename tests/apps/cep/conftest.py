"""The CEP app's Spark tests check the staged paths (the colocated column-key stage)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _staged(request: pytest.FixtureRequest) -> None:
    """Small batches stage by stage for the Spark tests (tests/conftest.py ``staged``)."""
    if "spark" in request.fixturenames:
        request.getfixturevalue("staged")
