"""Sources and sinks: ``ts.io.stdout()``, ``ts.io.callback(fn)``, ``ts.io.from_batches(...)``."""

from tstate.io.sinks import CallbackSink, Collected, FileSink, Kept, Sink, StdoutSink, callback, files, keep, stdout
from tstate.io.sources import Reader, Source, from_batches
from tstate.io.tables import csv, parquet

__all__ = ["CallbackSink", "Collected", "FileSink", "files", "Kept", "keep", "Reader", "Sink", "Source", "StdoutSink", "callback", "csv", "from_batches", "parquet", "stdout"]
