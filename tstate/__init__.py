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
from tstate.dataflow import Dataflow, Exchange, Feedback, InputStream, Scope, Stream
from tstate.engine.execution import Execution
from tstate.io.sinks import Collected
from tstate.probe import Probe
from tstate.progress import Antichain, MutableAntichain, PathSummary, Product

__all__ = [
    "Antichain",
    "Capability",
    "Collected",
    "Dataflow",
    "Exchange",
    "Execution",
    "Feedback",
    "InputCapability",
    "InputStream",
    "MutableAntichain",
    "PathSummary",
    "Probe",
    "Product",
    "Scope",
    "Stream",
    "errors",
    "io",
]

__version__ = "0.1.0"
