"""Tracked containers: they behave like dict / list, and their change logs rebuild the
current value from the base (checked against a reference model on random operations)."""

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstate.types import Array, ArrayChanges, Map, MapChanges

# ---------------------------------------------------------------------- Map

keys = st.sampled_from("abcdefgh")
values = st.integers(-5, 5)

map_ops = st.one_of(
    st.tuples(st.just("set"), keys, values),
    st.tuples(st.just("del"), keys),
    st.tuples(st.just("pop"), keys),
    st.tuples(st.just("pop_default"), keys),
    st.tuples(st.just("popitem")),
    st.tuples(st.just("setdefault"), keys, values),
    st.tuples(st.just("update"), st.dictionaries(keys, values, max_size=3)),
    st.tuples(st.just("get"), keys),
    st.tuples(st.just("clear")),
    st.tuples(st.just("clean")),
)


def apply_map_op(m: Any, op: tuple[Any, ...]) -> Any:
    """Run ``op`` on a Map or a dict; returns the result or the exception type."""
    name, *args = op
    try:
        if name == "set":
            m[args[0]] = args[1]
        elif name == "del":
            del m[args[0]]
        elif name == "pop":
            return m.pop(args[0])
        elif name == "pop_default":
            return m.pop(args[0], None)
        elif name == "popitem":
            return m.popitem()
        elif name == "setdefault":
            return m.setdefault(*args)
        elif name == "update":
            m.update(args[0])
        elif name == "get":
            return m.get(args[0])
        elif name == "clear":
            m.clear()
    except KeyError:
        return KeyError
    return None


@given(st.dictionaries(keys, values, max_size=5), st.lists(map_ops, max_size=30))
def test_map_matches_dict_and_its_change_log(initial: dict[str, int], ops: list[tuple[Any, ...]]) -> None:
    m: Map[str, int] = Map(initial)
    d = dict(initial)
    base: dict[str, int] = {}  # a fresh map's changes are relative to empty
    assigned = set(initial)  # reference: keys assigned since the clean point, still present
    for op in ops:
        if op[0] == "clean":
            assert m.take_changes() == MapChanges(frozenset(assigned), frozenset(base.keys() - d.keys()))
            base, assigned = dict(d), set()
            assert not m.dirty and m.has_base
            continue
        before = set(d)
        assert apply_map_op(m, op) == apply_map_op(d, op)
        assert m == d and d == m and len(m) == len(d) and list(m) == list(d)
        if op[0] == "set" or (op[0] == "setdefault" and op[1] not in before):
            assigned.add(op[1])
        elif op[0] == "update":
            assigned |= op[1].keys()
        assigned &= d.keys()
        changed, deleted = m.changes()
        assert changed == assigned
        assert deleted == base.keys() - d.keys()
        # the log rebuilds the current value from the base
        rebuilt = {k: v for k, v in base.items() if k not in deleted}
        rebuilt.update({k: d[k] for k in changed})
        assert rebuilt == d


def test_map_changes_are_exact_for_assignments() -> None:
    m = Map({"a": 1, "b": 2, "c": 3})
    m.mark_clean()
    m["a"] = 10
    m["z"] = 0
    del m["b"]
    m["b"] = 5  # deleted then set again: changed, not deleted
    del m["c"]
    m["y"] = 1
    del m["y"]  # added then removed: no trace
    assert m.changes() == MapChanges(frozenset({"a", "z", "b"}), frozenset({"c"}))


def test_reading_a_mutable_value_marks_it_changed() -> None:
    m: Map[str, list[int]] = Map({"a": [1], "b": [2], "c": [3], "n": 1})  # type: ignore[dict-item]
    m.mark_clean()
    m["a"].append(5)
    m.get("b")
    assert m.peek("c") == [3]
    assert m["n"] == 1  # immutable: not marked
    assert m.changes().changed == {"a", "b"}
    m.take_changes()
    list(m.values())
    assert m.changes().changed == {"a", "b", "c"}
    m.take_changes()
    m.touch("n")
    assert m.changes().changed == {"n"}
    with pytest.raises(KeyError):
        m.touch("missing")
    m.take_changes()
    assert "a" in m and m == {"a": [1, 5], "b": [2], "c": [3], "n": 1}  # comparing reads nothing
    assert not m.dirty


def test_map_basics() -> None:
    m = Map(a=1)
    assert repr(m) == "Map({'a': 1})"
    assert m.changes() == (frozenset({"a"}), frozenset())  # a plain pair, too
    assert not m.has_base
    assert m != {"a": 2} and m != 3 and m == Map({"a": 1})
    c = m.copy()
    assert c == m and c is not m and not c.has_base
    assert dict(m.items()) == {"a": 1} and list(m.keys()) == ["a"]
    with pytest.raises(KeyError):
        Map().popitem()
    with pytest.raises(TypeError):
        hash(m)
    deep = copy.deepcopy(m)
    assert deep == m and deep.changes() == m.changes()


# ---------------------------------------------------------------------- Array

small = st.integers(-3, 3)
index = st.integers(-8, 8)

array_ops = st.one_of(
    st.tuples(st.just("append"), small),
    st.tuples(st.just("append"), small),
    st.tuples(st.just("extend"), st.lists(small, max_size=3)),
    st.tuples(st.just("iadd"), st.lists(small, max_size=3)),
    st.tuples(st.just("setitem"), index, small),
    st.tuples(st.just("setslice"), index, index, st.lists(small, max_size=3)),
    st.tuples(st.just("setstep"), st.integers(-3, 3).filter(bool), small),
    st.tuples(st.just("delitem"), index),
    st.tuples(st.just("delslice"), index, index),
    st.tuples(st.just("insert"), index, small),
    st.tuples(st.just("pop")),
    st.tuples(st.just("pop_at"), index),
    st.tuples(st.just("remove"), small),
    st.tuples(st.just("clear")),
    st.tuples(st.just("reverse")),
    st.tuples(st.just("sort")),
    st.tuples(st.just("getslice"), index, index),
    st.tuples(st.just("clean")),
)


def apply_array_op(a: Any, op: tuple[Any, ...]) -> Any:
    """Run ``op`` on an Array or a list; returns the result or the exception type."""
    name, *args = op
    try:
        if name == "append":
            a.append(args[0])
        elif name == "extend":
            a.extend(args[0])
        elif name == "iadd":
            a += args[0]
        elif name == "setitem":
            a[args[0]] = args[1]
        elif name == "setslice":
            a[args[0] : args[1]] = args[2]
        elif name == "setstep":
            span = range(len(a))[:: args[0]]
            a[:: args[0]] = [args[1]] * len(span)
        elif name == "delitem":
            del a[args[0]]
        elif name == "delslice":
            del a[args[0] : args[1]]
        elif name == "insert":
            a.insert(args[0], args[1])
        elif name == "pop":
            return a.pop()
        elif name == "pop_at":
            return a.pop(args[0])
        elif name == "remove":
            a.remove(args[0])
        elif name == "clear":
            a.clear()
        elif name == "reverse":
            a.reverse()
        elif name == "sort":
            a.sort()
        elif name == "getslice":
            return a[args[0] : args[1]]
    except (IndexError, ValueError) as exc:
        return type(exc)
    return None


def rebuild(base: list[Any], changes: ArrayChanges, current: list[Any]) -> list[Any]:
    """What a reader holding ``base`` rebuilds from the change log (reading the new
    items from ``current``)."""
    out = base[: changes.keep]
    for i in changes.overwritten:
        out[i] = current[i]
    return out + current[changes.keep :]


@given(st.lists(small, max_size=6), st.lists(array_ops, max_size=30))
def test_array_matches_list_and_its_change_log(initial: list[int], ops: list[tuple[Any, ...]]) -> None:
    a: Array[int] = Array(initial)
    ref = list(initial)
    base: list[int] = []
    for op in ops:
        if op[0] == "clean":
            assert rebuild(base, a.take_changes(), ref) == ref
            base = list(ref)
            assert not a.dirty and a.has_base and not a.changes()
            continue
        assert apply_array_op(a, op) == apply_array_op(ref, op)
        assert a == ref and len(a) == len(ref) and list(a) == ref
        c = a.changes()
        assert c.base_len == len(base) and c.length == len(ref)
        assert 0 <= c.keep <= min(len(base), len(ref))
        assert all(0 <= i < c.keep for i in c.overwritten)
        # the prefix that is neither truncated nor overwritten is unchanged
        assert all(base[i] == ref[i] for i in range(c.keep) if i not in c.overwritten)
        assert rebuild(base, c, ref) == ref


def test_appends_are_compact() -> None:
    a = Array(range(1000))
    a.mark_clean()
    a.append(1000)
    a.extend([1001, 1002])
    assert a.changes() == ArrayChanges(base_len=1000, keep=1000, overwritten=(), length=1003)
    assert list(a.changes().appended) == [1000, 1001, 1002] and not a.changes().truncated


def test_overwrites_and_truncation_are_logged() -> None:
    a = Array(range(10))
    a.mark_clean()
    a[3] = 30
    a[-1] = 90
    assert a.changes() == ArrayChanges(10, 10, (3, 9), 10)
    a.pop()  # the overwritten last item goes: the log forgets it
    assert a.changes() == ArrayChanges(10, 9, (3,), 9)
    del a[5:7]
    assert a.changes() == ArrayChanges(10, 5, (3,), 7)
    assert a.changes().truncated and list(a.changes().appended) == [5, 6]
    a.insert(0, -1)
    assert a.changes() == ArrayChanges(10, 0, (), 8)


def test_reading_mutable_items_marks_them() -> None:
    a: Array[list[int]] = Array([[1], [2], [3], [4]])
    a.mark_clean()
    a[0].append(9)
    a[1:2]
    assert a.peek(2) == [3]
    assert a.changes().overwritten == (0, 1)
    a.take_changes()
    for _ in a:
        pass
    assert a.changes().overwritten == (0, 1, 2, 3)
    a.take_changes()
    list(reversed(a))
    assert a.changes().overwritten == (0, 1, 2, 3)
    a.take_changes()
    a.touch(-1)
    assert a.changes().overwritten == (3,)
    t: Array[tuple[int, str]] = Array([(1, "a")])
    t.mark_clean()
    t[0]
    assert not t.dirty  # a tuple of scalars is immutable


def test_array_basics() -> None:
    a = Array([3, 1, 2])
    assert repr(a) == "Array([3, 1, 2])"
    assert a == [3, 1, 2] and a == Array([3, 1, 2]) and a != (3, 1, 2) and a != [1]
    assert a.index(1) == 1 and a.count(2) == 1 and 2 in a and 7 not in a
    a.extend(a)
    assert a == [3, 1, 2, 3, 1, 2]
    a.sort(key=lambda x: -x)
    assert a == [3, 3, 2, 2, 1, 1]
    c = a.copy()
    assert c == a and c is not a and not c.has_base
    with pytest.raises(IndexError):
        a[10] = 1
    with pytest.raises(IndexError):
        Array().pop()
    with pytest.raises(TypeError):
        hash(a)
