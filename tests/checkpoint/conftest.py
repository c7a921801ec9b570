"""Checkpoint tests: ``where`` runs a store test on a local directory and on S3."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path) -> str:  # type: ignore[no-untyped-def]
    """A fresh store location: a local directory, or a prefix in the moto S3 server."""
    if request.param == "local":
        return str(tmp_path)
    return request.getfixturevalue("s3").url("store")
