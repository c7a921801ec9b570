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

from tstate import errors, io
from tstate.capability import Capability, InputCapability
from tstate.checkpoint.coordinator import Checkpoints
from tstate.dataflow import Dataflow, Exchange, Feedback, InputStream, Scope, StatefulStream, Stream
from tstate.engine.execution import Execution
from tstate.io.sinks import Collected
from tstate.metrics import Metrics
from tstate.migration.commands import Assign, MoveBins, Rescale
from tstate.probe import Probe
from tstate.progress import Antichain, MutableAntichain, PathSummary, Product
from tstate.state.context import Context

__all__ = [
    "Antichain",
    "Assign",
    "Capability",
    "Checkpoints",
    "Collected",
    "Context",
    "Dataflow",
    "Exchange",
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
    "Scope",
    "StatefulStream",
    "Stream",
    "errors",
    "io",
]

__version__ = "0.1.0"
