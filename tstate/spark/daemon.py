"""The Python worker daemon of tstate's sessions: PySpark's own, with tstate's task code
imported once, before it forks the workers.

PySpark starts one daemon process per executor (``spark.python.daemon.module``,
default ``pyspark.daemon``) and forks every Python worker from it; a fresh worker then
imports what its task needs -- ``pyspark.worker``, ``pyarrow``, ``numpy`` and tstate's
task code with the operators and the engine, 0.8-0.9 CPU s a worker (quiet machine) --
so every worker an executor starts (each core's first task, and again after Spark
stopped an idle worker) paid it, while its task waited.  This daemon imports
:data:`PRELOAD` (and the modules named in :data:`ENV`) once, then runs PySpark's daemon
unchanged: every worker it forks starts with them loaded (fork shares them), so an
executor pays the imports once, not once per worker.

:func:`tstate.spark.local_session` sets it on local masters (where the executors run this
very interpreter, so tstate is importable there by construction).  On a session or
cluster of your own, set it where tstate is installed on the executors (it must be, for
tstate's tasks to run)::

    spark.python.daemon.module      tstate.spark.daemon
    spark.executorEnv.TSTATE_SPARK_PRELOAD   myflows.pipeline,myflows.udfs   # optional

A module that fails to import (missing, or raising on import) is reported on the
daemon's stderr (the executor's log) and skipped: the daemon still serves, and a task
that needs the module imports it itself, exactly as without preloading.  Preloading
changes no task's result, only when the imports happen.

Spark puts PySpark's own zips (``pyspark.zip``, ``py4j-*.zip``) first on a worker's
``PYTHONPATH``.  Python never caches the bytecode of modules it imports from a zip, so
every daemon compiled PySpark's modules from source again (about 0.5 CPU s on a quiet
machine, more than all of tstate's task code).  When those zips are the ones shipped
inside the pyspark package this interpreter has installed (a pip-installed pyspark, as
on every local master), they are the same modules as the installed package: the daemon
moves them after the rest of ``sys.path`` (:func:`unzipped`) before it imports
anything, so the installed package and its ``__pycache__`` are used.  Any other zip
(a cluster's ``SPARK_HOME``, ``--py-files``) stays where Spark put it.

The native threads the preloaded libraries start (OpenBLAS's pool, jemalloc's
background thread in pyarrow) stop at a fork by their own ``pthread_atfork`` handlers;
no Python thread is started before the daemon forks.  The heap the imports built is
frozen out of the collector's reach (:func:`gc.freeze`) before forking, as for any
pre-forking server: a worker's first collections do not walk (and copy, page by page)
the modules it shares with the daemon.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import Iterable, Mapping

__all__ = ["PRELOAD", "ENV", "preload", "preloaded", "requested", "unzipped", "main"]

#: what every tstate task imports: PySpark's worker loop, Arrow, numpy, and the task
#: modules (with tstate's package, the operators and the engine they import).  Not
#: ``pyarrow.compute`` nor ``pandas`` (which pyarrow imports on a task's first
#: ``to_numpy()``, ``pa.array`` or ``pa.scalar``): only some tasks import them (a
#: one-task batch of tstate.spark.local_batch imports neither), and in the daemon they
#: would delay every executor's first worker by 0.1 and 0.25-0.45 CPU s; a run's own
#: warm-up (:mod:`tstate.spark.warm`) imports them in the workers it starts, and
#: :data:`ENV` can name them
PRELOAD: tuple[str, ...] = (
    "pyspark.worker",
    "numpy",
    "pyarrow",
    "tstate.spark.task",
    "tstate.spark.local_batch",
    "tstate.spark.colocated",
    "tstate.spark.host",
    "tstate.spark.input_rows",
    "tstate.spark.rounds",
)

#: the environment variable naming more modules to preload, comma-separated (the
#: dataflow's own modules, ``pandas``, ...); on Spark set as
#: ``spark.executorEnv.TSTATE_SPARK_PRELOAD``
ENV = "TSTATE_SPARK_PRELOAD"

#: the modules this process preloaded (inherited by the workers it forks)
preloaded: tuple[str, ...] = ()


def preload(modules: Iterable[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Import ``modules`` in order; returns (those imported, (name, error) of those
    that failed).  A failure is skipped, never raised (module docstring)."""
    global preloaded
    done: list[str] = []
    failed: list[tuple[str, str]] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except (Exception, SystemExit) as exc:  # noqa: BLE001  (an optimisation only: the task imports it itself)
            failed.append((name, f"{type(exc).__name__}: {exc}"))
        else:
            done.append(name)
    preloaded = preloaded + tuple(done)
    return tuple(done), tuple(failed)


def requested(environ: Mapping[str, str]) -> tuple[str, ...]:
    """:data:`PRELOAD`, then the modules :data:`ENV` names in ``environ``."""
    extra = [m.strip() for m in environ.get(ENV, "").split(",")]
    return PRELOAD + tuple(dict.fromkeys(m for m in extra if m and m not in PRELOAD))


def unzipped(path: list[str]) -> list[str]:
    """``path`` (a ``sys.path``) with the zips inside the pyspark package found on its
    other entries moved to its end, in their order (module docstring); ``path``
    unchanged when no pyspark package is found outside a zip."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("pyspark", [p for p in path if not p.endswith(".zip")])
    if spec is None or spec.origin is None:
        return list(path)
    package = os.path.dirname(os.path.abspath(spec.origin)) + os.sep
    inside = [p for p in path if p.endswith(".zip") and os.path.abspath(p).startswith(package)]
    return [p for p in path if p not in inside] + inside


def main() -> None:
    """Preload (with PySpark's own zips after the installed package: :func:`unzipped`),
    then run PySpark's daemon (it forks the workers)."""
    if "pyspark" not in sys.modules:  # (imported already: it stays where it came from)
        sys.path[:] = unzipped(sys.path)
    _done, failed = preload(requested(os.environ))
    for name, error in failed:
        print(f"tstate.spark.daemon: not preloaded {name!r} ({error}); tasks import it themselves", file=sys.stderr)
    gc.collect()
    gc.freeze()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    # run as ``python -m tstate.spark.daemon``: this file is ``__main__``; the workers
    # read what was preloaded from the module under its own name
    from tstate.spark.daemon import main as _main

    _main()
