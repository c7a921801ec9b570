"""One stage of a CEP pattern (:class:`Stage`), the value :class:`apps.cep.pattern.Pattern`
is built of and :mod:`apps.cep.pattern_rules` checks; exported by :mod:`apps.cep.pattern`."""

from __future__ import annotations

from attrs import frozen

from apps.cep.conditions import Condition
from apps.cep.kinds import Contiguity, StageKind

__all__ = ["Stage"]


@frozen
class Stage:
    """One stage of a pattern (Flink calls it an individual pattern).

    ``min_times``/``max_times`` count the events the stage takes (``max_times`` None:
    unbounded, i.e. a looping stage); ``quantified`` is True once a quantifier call
    (``times``/``times_or_more``/``one_or_more``) made it a looping or times stage.
    ``contiguity`` is how the stage's first event attaches to the previous stage;
    ``inner`` how its events attach to each other."""

    name: str
    kind: StageKind = StageKind.POSITIVE
    contiguity: Contiguity = Contiguity.RELAXED
    condition: Condition | None = None
    until: Condition | None = None
    min_times: int = 1
    max_times: int | None = 1
    quantified: bool = False
    optional: bool = False
    greedy: bool = False
    inner: Contiguity = Contiguity.RELAXED
    inner_set: bool = False  # consecutive()/allow_combinations() was called

    @property
    def looping(self) -> bool:
        return self.max_times is None

    @property
    def negative(self) -> bool:
        return self.kind is not StageKind.POSITIVE

    def describe(self) -> str:
        q = ""
        if self.quantified:
            hi = "inf" if self.max_times is None else str(self.max_times)
            q = f"{{{self.min_times},{hi}}}"
        return f"{self.name}{q}{'?' if self.optional else ''}"
