"""What the sample apps' command lines (``python -m apps.cep``, ``python -m apps.graph``)
share: the ``--workers`` help and the exit-status convention, which is also the
``tstate`` command line's (:mod:`tstate.__main__`):

* 0 -- success;
* 1 -- bad input data or a runtime error, printed on stderr as ``error: ...`` naming
  the file, the row and the column (a :class:`tstate.errors.TstateError` or an
  ``OSError``);
* 2 -- a usage error: a bad option or option value (argparse prints the usage).
"""

from __future__ import annotations

__all__ = ["EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_CODES", "WORKERS_HELP"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

#: the ``--help`` epilog on exit codes
EXIT_CODES = (
    "exit status: 0 success; 1 bad input data or a runtime error (printed on stderr as 'error: ...', "
    "naming the file, row and column); 2 a usage error (a bad option)"
)

#: the ``--workers`` help
WORKERS_HELP = (
    "logical tstate workers, all in this one process (default: 1): keys are routed to them and state "
    "migrates between them, with the same results on any count, but they do not run in parallel "
    "(more workers are slower); for parallel speed use --backend spark"
)
