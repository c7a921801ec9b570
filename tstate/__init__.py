"""tstate: stateful streaming dataflows in the Timely Dataflow model.

The public surface is what this module exports; everything else is internal.

>>> import tstate as ts
>>> flow = ts.Dataflow("hello")
>>> nums = flow.input("nums")
>>> out = nums.map(lambda x: x + 1).filter(lambda x: x % 2 == 0).collect()
>>> nums.send(range(5)); nums.close()
>>> flow.run(workers=2)
>>> sorted(out.records())
[2, 4]
"""

from typing import TYPE_CHECKING

from tstate import errors, io
from tstate.backend import Backend
from tstate.capability import Capability, InputCapability
from tstate.checkpoint.settings import Checkpoints
from tstate.column_key import Col, col
from tstate.dataflow import Dataflow, Feedback, InputStream, Scope, StatefulStream, Stream
from tstate.io.sinks import Collected
from tstate.metrics import Metrics
from tstate.migration.commands import Assign, MoveBins, Rescale
from tstate.probe import Probe
from tstate.progress import Antichain, MutableAntichain, PathSummary, Product
from tstate.state.context import Context
from tstate.state.rocksdb.settings import RocksDB

if TYPE_CHECKING:  # pragma: no cover - loaded on first use (see __getattr__): building a dataflow loads no engine
    from tstate.engine.embedded import Embedded
    from tstate.engine.execution import Execution

__all__ = [
    "Antichain",
    "Assign",
    "Backend",
    "Capability",
    "Checkpoints",
    "Col",
    "Collected",
    "Context",
    "Dataflow",
    "Embedded",
    "Execution",
    "Feedback",
    "InputCapability",
    "InputStream",
    "Metrics",
    "MoveBins",
    "MutableAntichain",
    "PathSummary",
    "Probe",
    "Product",
    "Rescale",
    "RocksDB",
    "Scope",
    "StatefulStream",
    "Stream",
    "col",
    "errors",
    "io",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    if name == "Embedded":
        from tstate.engine.embedded import Embedded

        return Embedded
    if name == "Execution":
        from tstate.engine.execution import Execution

        return Execution
    if name == "Exchange":  # the former name of an input's exchange contract
        import warnings

        from tstate.plan import Pact

        warnings.warn("tstate.Exchange is tstate.plan.Pact", DeprecationWarning, stacklevel=2)
        return Pact
    raise AttributeError(f"module 'tstate' has no attribute {name!r}")
