"""Complex event processing on tstate: a Flink-CEP-compatible pattern library.

* :mod:`apps.cep.pattern` -- the pattern API (:class:`Pattern`, :class:`AfterMatchSkip`);
* :mod:`apps.cep.nfa` -- the compiler to an NFA;
* :mod:`apps.cep.matcher` -- the per-key engine (:class:`Matcher`, :class:`Match`,
  :class:`TimedOut`) whose state (:class:`KeyState`) is plain typed data;
* :mod:`apps.cep.sql` -- ``match_recognize(query)``: Flink SQL's MATCH_RECOGNIZE
  compiled into a :class:`Pattern` (with :mod:`apps.cep.sql_expressions`,
  :mod:`apps.cep.sql_functions`, :mod:`apps.cep.sql_cast`, :mod:`apps.cep.sql_fields`);
* :mod:`apps.cep.dataflow` -- ``cep(...)``, the tstate operator;
* :mod:`apps.cep.reference` -- a brute-force matcher, the oracle of the tests;
* :mod:`apps.cep.flights` -- the two flight-delay patterns of the sample app.
"""

from apps.cep.errors import (
    AfterMatchSkipError,
    EventFieldError,
    ExpressionError,
    PatternError,
    SqlError,
)
from apps.cep.matcher import Match, Matcher, TimedOut
from apps.cep.pattern import (
    AfterMatchSkip,
    Contiguity,
    Pattern,
    SkipKind,
    Stage,
    StageKind,
)
from apps.cep.state import KeyState

__all__ = [
    "AfterMatchSkip",
    "AfterMatchSkipError",
    "ExpressionError",
    "SqlError",
    "Contiguity",
    "EventFieldError",
    "KeyState",
    "Match",
    "Matcher",
    "Pattern",
    "PatternError",
    "SkipKind",
    "Stage",
    "StageKind",
    "TimedOut",
]
