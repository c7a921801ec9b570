"""How a state declaration becomes the state of a new key.

``default_factory(tp)``: an attrs class / ``int`` / ``list`` ... is called with no
arguments; a parameterised generic (``list[int]``, ``dict[str, Route]``,
``tstate.types.Map[str, int]``) calls its origin; ``Optional[T]`` starts as ``None``.

>>> default_factory(list[int])()
[]
>>> default_factory(int)()
0
"""

from __future__ import annotations

import types
import typing
from typing import Any, Callable

from tstate.errors import StateTypeError

__all__ = ["default_factory"]


def default_factory(tp: Any) -> Callable[[], Any]:
    """The function that creates the initial state of a key declared as ``tp``."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        if type(None) in typing.get_args(tp):
            return lambda: None
        raise StateTypeError(f"{tp!r}: a union state needs default=...")
    if origin is not None:
        if origin is tuple:
            return tuple
        if callable(origin):
            return origin  # type: ignore[no-any-return]
    if tp is None or tp is type(None):
        return lambda: None
    if isinstance(tp, type):
        return tp
    raise StateTypeError(f"{tp!r}: cannot make a default state; pass default=...")
