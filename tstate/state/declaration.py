"""How a state declaration becomes the state of a new key, and whether a state
function may change it in place.

``default_factory(tp)``: an attrs class / ``int`` / ``list`` ... is called with no
arguments; a parameterised generic (``list[int]``, ``dict[str, Route]``,
``tstate.types.Map[str, int]``) calls its origin; ``Optional[T]`` starts as ``None``.

``returns_required(schema)``: whether a ``@flow.stateful`` function must *return* the
new state because the state's value cannot change in place -- ``"always"`` for ``int``,
``float``, ``str``, ``bytes``, ``bool``, ``None``, datetimes, dates, enums, unions of
scalars, and tuples, frozensets and frozen attrs classes made only of such values;
``"when None"`` for ``Optional[T]`` of a mutable ``T`` (a key whose state is ``None``
must return one); ``"never"`` for everything else (attrs classes, lists, dicts, sets,
``Map``, ``Array``), which the function may mutate and return ``None``.

>>> default_factory(list[int])()
[]
>>> default_factory(int)()
0
"""

from __future__ import annotations

import types
import typing
from typing import TYPE_CHECKING, Any, Callable, Literal

from tstate.errors import StateTypeError

if TYPE_CHECKING:  # pragma: no cover
    from tstate.types.schema import Schema

__all__ = ["default_factory", "returns_required", "never_returns_a_value"]


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


def _immutable(schema: Schema) -> bool:
    """Whether no value of ``schema`` can be changed in place (see the module docstring)."""
    from tstate.types.copier import immutable

    return immutable(schema)


def returns_required(schema: Schema) -> Literal["always", "when None", "never"]:
    """When a state function must return the new state (see the module docstring)."""
    from tstate.types.schema import Kind

    if _immutable(schema):
        return "always"
    if schema.kind is Kind.OPTIONAL:
        return "when None"
    return "never"


def never_returns_a_value(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``'s source has no ``return`` with a value (outside nested functions
    and classes), so it always returns ``None``, and calls no ``.clear()`` (a function
    that drops its key, ``ctx.clear()``, has nothing to return).  False when it cannot
    be told: a lambda, a builtin or a callable object, no source at hand, a generator."""
    import ast
    import inspect
    import textwrap

    code = getattr(fn, "__code__", None)
    if code is None or code.co_name == "<lambda>" or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return False
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != code.co_name:
        return False
    todo: list[ast.AST] = list(node.body)
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Return) and n.value is not None:
            if not (isinstance(n.value, ast.Constant) and n.value.value is None):
                return False
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "clear":
            return False
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return True
