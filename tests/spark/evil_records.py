"""A module that must never be imported by a decoder: importing it leaves a flag file
(:data:`FLAG`, checked by tests/spark/test_record_types.py), in whichever process
imports it (the driver or a Spark Python worker)."""

from __future__ import annotations

import os
import tempfile

from attrs import define

FLAG = os.path.join(tempfile.gettempdir(), f"tstate-evil-records-imported-{os.getuid()}")

with open(FLAG, "w") as _f:  # the side effect on import
    _f.write(str(os.getpid()))


@define
class Payload:
    command: str
