"""Sources and sinks: ``ts.io.stdout()``, ``ts.io.callback(fn)``, ``ts.io.from_batches(...)``."""

from tstate.io.sinks import CallbackSink, Collected, Sink, StdoutSink, callback, stdout
from tstate.io.sources import Reader, Source, from_batches

__all__ = ["CallbackSink", "Collected", "Reader", "Sink", "Source", "StdoutSink", "callback", "from_batches", "stdout"]
