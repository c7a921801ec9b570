"""The RocksDB store's tests need rocksdict (the rocksdb extra, in the test extra)."""

import pytest

pytest.importorskip("rocksdict", reason="the RocksDB keyed-state store needs rocksdict (the rocksdb extra)")
