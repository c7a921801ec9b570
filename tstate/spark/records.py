"""How records cross a Spark exchange: msgpack, never pickle.

Records between stages travel through Spark's shuffle as ``binary`` cells, one cell per
``(operator, bin, time)`` group holding a list of records.  msgpack carries ``None``,
bools, ints, floats, str, bytes, lists and dicts; a cell with only those is plain
msgpack.  The rest of what Spark rows and user functions commonly produce -- ``tuple``,
``set``, ``frozenset``, ``datetime``, ``date``, ``Decimal``, ints beyond 64 bits, and
instances of **attrs classes** and **named tuples** defined at a module's top level
(their fields' values, rebuilt with ``cls(*values)``; every field must be an
``__init__`` argument) -- travel as *tagged arrays*: ``[mark, items...]``, the mark a
one-byte extension saying what the array is (for a record class, with the index of its
path in the cell's class table, so that a path is written once per cell, not once per
record).  Such a cell is one extension holding ``[class table, body]``; its body is
packed in one pass, each tagged array in place (no nested packing per value) and read
back in one pass, each tagged array rebuilt innermost first.  (Cells of older runs, held
in a checkpoint's held file, carry one extension per value, nested; they are still
read.)  Such a class must be in
the dataflow's allow-list (:mod:`tstate.spark.record_types`: state types, classes named
by the functions' type hints, ``flow.record_types(...)``): the writer refuses another
one, and the reader rebuilds a path only as a registered class, **never importing** the
module a cell names (cells and held-back files may sit in a shared bucket) -- anything
else raises :class:`~tstate.errors.RecordClassError` naming the path and the cell or
file.  Anything else (a custom class) raises :class:`~tstate.errors.SparkError` naming
the operator and the record: map it to a tuple, dict or attrs instance before the
exchange.

Three faster forms of a cell, chosen by the writer and told apart by the reader: a cell
whose records are all *flat tuples* (of ``None``, bool, int, float, str, bytes; the
common ``(key, value)`` outputs) is one extension holding the tuples packed as plain
arrays, read back with ``use_list=False`` (no extension per record); a cell whose
records are all instances of **one registered attrs class or named tuple with flat
fields** (an event type) is one extension naming the class once and holding each
record's field values as a plain array; and input **rows**
going straight from an input to a shuffle are an Arrow IPC stream (:func:`encode_rows`;
it starts with Arrow's continuation marker ``0xFFFFFFFF``, which no msgpack cell does),
read back as the input task would have read them (``to_pylist``, in the input's record
shape; a record class -- ``Source(df, record=Event)`` -- is named by its path and
rebuilt column by column, only as a registered class).

>>> decode_records(encode_records([(1, "a"), {"k": {2, 3}}, None], "op"))
[(1, 'a'), {'k': {2, 3}}, None]
>>> from tstate.progress.timestamp import Product
>>> decode_records(encode_records([Product(1, 2)], "op"))
[Product(outer=1, inner=2)]
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import threading
from decimal import Decimal
from typing import Any, Callable

import msgpack

from tstate.errors import RecordClassError, SparkError
from tstate.keys import pack_plain
from tstate.spark.record_types import BUILTIN, RecordTypes, class_path, is_record_class

__all__ = [
    "encode_records", "decode_records", "decode_cells", "encode_groups", "decode_groups", "encode_rows", "decode_rows",
    "rows_to_records", "encode_binned_rows", "decode_binned", "BIN_COLUMN",
]

_TUPLE, _SET, _FROZENSET, _DATETIME, _DATE, _DECIMAL, _ATTRS, _NAMEDTUPLE = 1, 2, 3, 4, 5, 6, 7, 8
#: a cell of flat tuples (see the module docstring)
_FLAT_TUPLES = 9
#: an int beyond 64 bits (decimal digits)
_BIGINT = 10
#: a cell whose records are all instances of one attrs class or named tuple with flat
#: fields (see the module docstring)
_FLAT_OBJECTS = 11
#: a cell whose other values are *tagged arrays* (see the module docstring): its data is
#: ``[class table, body]``
_TAGGED = 12
#: the first element of a tagged array: its kind (one of the codes above) as the first
#: byte; for a record class, then its index in the cell's class table
_MARK = 13
_SCALARS = frozenset({type(None), bool, int, float, str, bytes})
#: the first bytes of an Arrow IPC stream (a msgpack cell never starts with 0xFF: a cell
#: is an array or an extension)
_ARROW_MAGIC = b"\xff\xff\xff\xff"
#: the column of a binned rows cell (:func:`encode_binned_rows`) holding each row's bin
BIN_COLUMN = "__tstate_bin"
_SHAPE_KEY = b"tstate.record"
_CLASS_KEY = b"tstate.record_class"


class _Codec:
    """One cell's decoder: ``types`` is the dataflow's allow-list of record classes,
    ``where`` names the cell / file for errors (a string, or a function giving it,
    called only on error)."""

    __slots__ = ("types", "where")

    def __init__(self, types: RecordTypes, where: "str | Callable[[], str]") -> None:
        self.types = types
        self.where = where

    def _where(self) -> str:
        w = self.where
        return w if isinstance(w, str) else w()

    def ext(self, code: int, data: bytes) -> Any:
        if code == _TUPLE:
            return tuple(self.unpack(data))
        if code == _SET:
            return set(self.unpack(data))
        if code == _FROZENSET:
            return frozenset(self.unpack(data))
        if code == _DATETIME:
            return _dt.datetime.fromisoformat(data.decode())
        if code == _DATE:
            return _dt.date.fromisoformat(data.decode())
        if code == _DECIMAL:
            return Decimal(data.decode())
        if code == _ATTRS or code == _NAMEDTUPLE:
            path, values = self.unpack(data)
            return self._record_class(path, code == _NAMEDTUPLE)(*values)
        if code == _FLAT_TUPLES:
            return list(msgpack.unpackb(data, use_list=False, raw=False))
        if code == _FLAT_OBJECTS:
            path, named_tuple, rows = msgpack.unpackb(data, use_list=False, raw=False)
            return list(itertools.starmap(self._record_class(path, bool(named_tuple)), rows))
        if code == _BIGINT:
            return int(data.decode())
        if code == _TAGGED:
            return self._tagged(data)
        return msgpack.ExtType(code, data)  # pragma: no cover - not written by us

    def _tagged(self, data: bytes) -> Any:
        """The records of a tagged cell's data (``[class table, body]``): each array
        whose first element is a mark is rebuilt by it, innermost first."""
        table, body = msgpack.unpackb(data, raw=False)
        classes = [self._record_class(path, bool(named_tuple)) for path, named_tuple in table]
        marks: dict[bytes, _Mark] = {}

        def ext(code: int, d: bytes) -> Any:
            if code != _MARK:
                return self.ext(code, d)
            m = marks.get(d)
            if m is None:
                m = marks[d] = _Mark.of(d, classes)
            return m

        def hook(lst: list[Any]) -> Any:
            if lst:
                m = lst[0]
                if m.__class__ is _Mark:
                    return m.build(lst)
            return lst

        return msgpack.unpackb(body, ext_hook=ext, list_hook=hook, raw=False, strict_map_key=False)

    def _record_class(self, path: Any, named_tuple: bool) -> Any:
        """The registered class at ``path``; never imports anything."""
        cls = self.types.get(path) if isinstance(path, str) else None
        if cls is None:
            raise RecordClassError(
                f"{self._where()}: names record class {path!r}, which this dataflow did not register; refused "
                f"without importing anything (the dataflow registered: {', '.join(self.types.names())}). If the "
                "class is yours, register it before running: flow.record_types(TheClass); otherwise the file was "
                "not written by this dataflow"
            )
        if named_tuple != issubclass(cls, tuple):
            raise RecordClassError(f"{self._where()}: {path!r} is not a {'named tuple' if named_tuple else 'attrs class'}")
        return cls

    def unpack(self, data: bytes) -> Any:
        return msgpack.unpackb(data, ext_hook=self.ext, raw=False, strict_map_key=False)

    def decode(self, data: bytes) -> Any:
        """:meth:`unpack`, a malformed cell raising :class:`SparkError` naming it."""
        try:
            return self.unpack(data)
        except RecordClassError:
            raise
        except (TypeError, ValueError, IndexError, msgpack.UnpackException) as exc:
            raise SparkError(f"{self._where()}: malformed records ({type(exc).__name__}: {exc})") from None


class _Mark:
    """A tagged array's first element, decoded: how the array is rebuilt."""

    __slots__ = ("build",)

    def __init__(self, build: Callable[[list[Any]], Any]) -> None:
        self.build = build

    @classmethod
    def of(cls, data: bytes, classes: list[type]) -> "_Mark":
        kind = data[0]
        if kind == _ATTRS or kind == _NAMEDTUPLE:
            index = int.from_bytes(data[1:], "big")
            if index >= len(classes):
                raise ValueError(f"record class {index} not in the cell's table")
            c = classes[index]

            def record(lst: list[Any]) -> Any:
                del lst[0]  # (the array is ours: no copy)
                return c(*lst)

            return cls(record)
        build = _BUILDS.get(kind)
        if build is None:
            raise ValueError(f"unknown mark {data!r}")
        return cls(build)


def _rest(kind: type) -> Callable[[list[Any]], Any]:
    def build(lst: list[Any]) -> Any:
        del lst[0]  # (the array is ours: no copy)
        return kind(lst)

    return build


_BUILDS: dict[int, Callable[[list[Any]], Any]] = {
    _TUPLE: _rest(tuple),
    _SET: _rest(set),
    _FROZENSET: _rest(frozenset),
    _DATETIME: lambda lst: _dt.datetime.fromisoformat(lst[1]),
    _DATE: lambda lst: _dt.date.fromisoformat(lst[1]),
    _DECIMAL: lambda lst: Decimal(lst[1]),
    _BIGINT: lambda lst: int(lst[1]),
}


def _mark(kind: int, index: int = -1) -> msgpack.ExtType:
    return msgpack.ExtType(_MARK, bytes([kind]) + (index.to_bytes(4, "big") if index >= 0 else b""))


_TUPLE_MARK, _SET_MARK, _FROZENSET_MARK = _mark(_TUPLE), _mark(_SET), _mark(_FROZENSET)
_SCALAR_MARKS: dict[type, tuple[msgpack.ExtType, Callable[[Any], str]]] = {
    _dt.datetime: (_mark(_DATETIME), _dt.datetime.isoformat),
    _dt.date: (_mark(_DATE), _dt.date.isoformat),
    Decimal: (_mark(_DECIMAL), str),
    int: (_mark(_BIGINT), str),  # (beyond msgpack's 64 bits)
}


class _Tagger:
    """The encoder of one cell at a time (one per thread, with its packer: making a
    packer allocates its buffer): a value msgpack does not carry becomes a *tagged
    array*, ``[mark, items...]``, packed in place by the same packer -- no nested
    packing, no bytes copied per value; a record class is named once per cell, in the
    cell's class table (``[[path, named_tuple], ...]``), and its instances by their
    index there."""

    def __init__(self) -> None:
        self.types: RecordTypes = BUILTIN
        self.operator = ""
        self.table: list[list[Any]] = []
        self.specs: dict[type, tuple[msgpack.ExtType, Callable[[Any], Any]]] = {}
        self.used = False
        self.packer = msgpack.Packer(default=self.default, use_bin_type=True, strict_types=True)

    def encode(self, records: list[Any], operator: str, types: RecordTypes) -> bytes:
        self.types, self.operator, self.used = types, operator, False
        self.table, self.specs = [], {}
        body: bytes = self.packer.pack(records)  # (on an error the packer has reset its buffer)
        if not self.used:  # plain msgpack
            return body
        return msgpack.packb(msgpack.ExtType(_TAGGED, _pack_plain([self.table, body])))  # type: ignore[no-any-return]

    def default(self, obj: Any) -> Any:
        self.used = True
        t = type(obj)
        if t is tuple:
            return [_TUPLE_MARK, *obj]
        spec = self.specs.get(t)
        if spec is not None:
            return [spec[0], *spec[1](obj)]
        if t is set:
            return [_SET_MARK, *obj]
        if t is frozenset:
            return [_FROZENSET_MARK, *obj]
        scalar = _SCALAR_MARKS.get(t)
        if scalar is not None:
            return [scalar[0], scalar[1](obj)]
        cls = _classes.get(t)
        if cls is None and is_record_class(t):
            cls = _classes[t] = _class_spec(t)
        if cls is not None:
            path, kind, get = cls
            if self.types.classes.get(path) is None:
                raise RecordClassError(
                    f"record {_short(obj)} sent to operator {self.operator!r} is an instance of {path!r}, which this "
                    f"dataflow did not register: records cross a Spark exchange only as classes the dataflow declares. "
                    f"Register it before running: flow.record_types({t.__qualname__}) (or name {t.__qualname__} in a "
                    "type hint of an operator's function)"
                )
            self.specs[t] = (_mark(kind, len(self.table)), get)
            self.table.append([path, kind == _NAMEDTUPLE])
            return [self.specs[t][0], *get(obj)]
        raise TypeError(f"cannot encode {t.__name__}")


_tagging = threading.local()


def _tagger() -> _Tagger:
    t = getattr(_tagging, "tagger", None)
    if t is None:
        t = _tagging.tagger = _Tagger()
    return t


#: record class -> (path, extension code, the function giving its field values in order)
_classes: dict[type, tuple[str, int, Callable[[Any], Any]]] = {}


def _class_spec(t: type) -> tuple[str, int, Callable[[Any], Any]]:
    import operator

    if issubclass(t, tuple):
        return class_path(t), _NAMEDTUPLE, iter
    names = [a.name for a in t.__attrs_attrs__]  # type: ignore[attr-defined]
    if len(names) > 1:
        return class_path(t), _ATTRS, operator.attrgetter(*names)
    return class_path(t), _ATTRS, (lambda o, n=names: [getattr(o, a) for a in n])


def _short(obj: Any) -> str:
    r = repr(obj)
    return r if len(r) <= 200 else r[:200] + "..."


def encode_records(records: list[Any], operator: str, types: RecordTypes = BUILTIN) -> bytes:
    """One shuffle cell: the records (see the module docstring); ``operator`` names the
    operator the records go to, for the error message; ``types``: the dataflow's
    allow-list of record classes (an instance of another class raises
    :class:`~tstate.errors.RecordClassError` saying how to register it)."""
    if records:
        first = type(records[0])
        try:
            if first is tuple:
                if _flat_tuples(records):
                    return msgpack.packb(msgpack.ExtType(_FLAT_TUPLES, _pack_plain(records)))  # type: ignore[no-any-return]
            else:
                flat = _flat_objects(records, first)
                if flat is not None and types.get(flat[0]) is not None:  # (unregistered: the codec says how)
                    return msgpack.packb(msgpack.ExtType(_FLAT_OBJECTS, _pack_plain(flat)))  # type: ignore[no-any-return]
        except (TypeError, ValueError, OverflowError):  # e.g. an int beyond 64 bits: the general form says why
            pass
    tagger = _tagger()
    try:
        return tagger.encode(records, operator, types)
    except RecordClassError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        for r in records:
            try:
                tagger.encode([r], operator, types)
            except (TypeError, ValueError, OverflowError):
                raise SparkError(
                    f"record {r!r} sent to operator {operator!r} cannot cross a Spark exchange ({exc}): "
                    "records must be built from None, bool, int, float, str, bytes, list, tuple, dict, set, "
                    "datetime, date, Decimal and instances of top-level attrs classes and named tuples"
                ) from None
        raise SparkError(f"records sent to operator {operator!r} cannot cross a Spark exchange: {exc}") from None


def decode_records(data: bytes, types: RecordTypes = BUILTIN, where: "str | Callable[[], str]" = "a shuffle cell") -> list[Any]:
    """The records of one shuffle cell (any of its forms, see the module docstring).
    Records of attrs classes and named tuples are rebuilt only as classes in ``types``
    (the dataflow's allow-list); any other class path raises
    :class:`~tstate.errors.RecordClassError` naming it and ``where`` the cell came from,
    and nothing is imported."""
    if data[:4] == _ARROW_MAGIC:
        return decode_rows(data, types, where)
    return _Codec(types, where).decode(data)  # type: ignore[no-any-return]


def encode_groups(
    groups: list[tuple[int, list[Any]]], operator: str, also: tuple[int, ...] = (), types: RecordTypes = BUILTIN
) -> bytes:
    """One shuffle cell holding the records of several bins (``[(bin, records), ...]``,
    all for one operator, time and partition): one cell per destination instead of one
    per bin, so the per-cell cost is paid once.  The records are encoded together, as
    one :func:`encode_records` cell (its fast forms apply to all of them).  ``also``:
    other operators that receive exactly these records in these bins (two operators
    keyed alike on one stream): the records cross the exchange once, for all of them.

    >>> decode_groups(encode_groups([(3, ["a", "b"]), (7, ["c"])], "op", also=(9,)))
    ([(3, ['a', 'b']), (7, ['c'])], [9])
    """
    bins = [b for b, _ in groups]
    counts = [len(r) for _, r in groups]
    body = encode_records([r for _, recs in groups for r in recs], operator, types)
    return _pack_plain([bins, counts, body, list(also)])  # type: ignore[no-any-return]


def decode_groups(
    data: bytes, types: RecordTypes = BUILTIN, where: "str | Callable[[], str]" = "a shuffle cell"
) -> tuple[list[tuple[int, list[Any]]], list[int]]:
    """The ``[(bin, records), ...]`` of a cell written by :func:`encode_groups`, and the
    other operators it is for."""
    try:
        bins, counts, body, also = msgpack.unpackb(data, raw=False)
    except (TypeError, ValueError, msgpack.UnpackException) as exc:
        raise SparkError(f"{where if isinstance(where, str) else where()}: malformed records ({exc})") from None
    recs = decode_records(body, types, where)
    out: list[tuple[int, list[Any]]] = []
    o = 0
    for b, n in zip(bins, counts):
        out.append((b, recs[o : o + n]))
        o += n
    return out, also


#: attrs class or named tuple -> (import path, named tuple?, its fields' getter), or
#: None when its records cannot take the flat form
_getters: dict[type, Any] = {}


def _flat_objects(records: list[Any], cls: type) -> Any:
    """``[path, named_tuple, [values, ...]]`` when every record is an instance of
    ``cls`` (one attrs class or named tuple at a module's top level) whose field values
    are all scalars; else None.  Decoded by ``cls(*values)``, like the per-record
    extensions, and only for registered classes."""
    import operator

    spec = _getters.get(cls, False)
    if spec is False:
        spec = None
        if is_record_class(cls):
            path = class_path(cls)
            attrs_fields = getattr(cls, "__attrs_attrs__", None)
            if attrs_fields is not None and len(attrs_fields) > 1 and all(a.init for a in attrs_fields):
                spec = (path, False, operator.attrgetter(*(a.name for a in attrs_fields)))
            elif issubclass(cls, tuple) and len(getattr(cls, "_fields", ())) > 1:
                spec = (path, True, tuple)
        _getters[cls] = spec
    if spec is None:
        return None
    path, named_tuple, get = spec
    # C-level passes: the records' classes, their field values, the values' types
    if set(map(type, records)) != {cls}:
        return None
    values = list(map(get, records))
    if not _SCALARS.issuperset(map(type, itertools.chain.from_iterable(values))):
        return None
    return [path, named_tuple, values]


def _flat_tuples(records: list[Any]) -> bool:
    scalars = _SCALARS
    for r in records:
        if type(r) is not tuple:
            return False
        for x in r:
            if type(x) not in scalars:
                return False
    return True


_pack_plain = pack_plain  # (tstate.keys: tuples as arrays; one C call, GIL-safe)


#: a record shape: ``"dict"``, ``"tuple"``, ``"value"`` or a record class
Shape = Any


def record_fields(cls: type) -> list[str]:
    """The fields a record class (an attrs class or a named tuple) is built from,
    positionally, in order: ``cls(*values)``."""
    attrs_fields = getattr(cls, "__attrs_attrs__", None)
    if attrs_fields is not None:
        return [a.name for a in attrs_fields if a.init]
    return list(getattr(cls, "_fields", ()))


def rows_to_records(data: Any, shape: Shape) -> list[Any]:
    """An Arrow RecordBatch or Table's rows as records of ``shape``: ``"dict"`` (column
    -> value), ``"tuple"``, ``"value"`` (the first column), or a record class built
    from the columns named by its fields, column by column (``cls(*values)``: no
    dict per row).  A class field without a column raises
    :class:`~tstate.errors.SparkError` naming both."""
    if isinstance(shape, type):
        names = data.schema.names
        fields = record_fields(shape)
        missing = [f for f in fields if f not in names]
        if missing:
            raise SparkError(
                f"record class {class_path(shape)!r}: the rows have no column(s) {', '.join(map(repr, missing))} "
                f"for its field(s) (columns: {', '.join(names)})"
            )
        if not fields:
            return [shape() for _ in range(data.num_rows)]
        return list(map(shape, *(data.column(f).to_pylist() for f in fields)))
    if shape == "dict":
        return data.to_pylist()  # type: ignore[no-any-return]
    cols = [c.to_pylist() for c in data.columns]
    if shape == "value":
        return cols[0]  # type: ignore[no-any-return]
    return list(zip(*cols))


def encode_rows(table: Any, shape: Shape) -> bytes:
    """One shuffle cell holding input rows (an Arrow Table or RecordBatch) as an Arrow
    IPC stream; :func:`decode_records` turns it into records of ``shape`` (a record
    class by its path: the reader rebuilds it only as a class of its allow-list)."""
    import pyarrow as pa

    schema = table.schema
    meta = {_CLASS_KEY: class_path(shape).encode()} if isinstance(shape, type) else {_SHAPE_KEY: shape.encode()}
    schema = schema.with_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        if isinstance(table, pa.Table):
            w.write_table(table.replace_schema_metadata(schema.metadata))
        else:
            w.write_batch(table.replace_schema_metadata(schema.metadata))
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def encode_binned_rows(table: Any, bins: Any, shape: Shape) -> bytes:
    """One shuffle cell holding the input rows of several bins (an Arrow Table or
    RecordBatch; ``bins``: each row's bin, a sequence of ints, equal bins adjacent) as one
    Arrow IPC stream with the bins in column :data:`BIN_COLUMN`: one cell per
    destination instead of one per bin.  :func:`decode_binned` reads it back."""
    import pyarrow as pa

    return encode_rows(table.append_column(BIN_COLUMN, pa.array(bins, pa.int32())), shape)


def decode_binned(
    cells: list[Any], types: RecordTypes = BUILTIN, where: "str | Callable[[int], str]" = "a shuffle cell"
) -> list[list[tuple[int, list[Any]]]]:
    """The records of many cells written by :func:`encode_binned_rows`, per cell as
    ``[(bin, records), ...]`` (one entry per run of equal bins, in the cell's order;
    ``where(i)`` names cell ``i`` in errors).  Cells of one schema are converted to
    Python together, as :func:`decode_cells` does."""
    import numpy as np
    import pyarrow as pa

    out: list[list[tuple[int, list[Any]]]] = [[] for _ in cells]
    by_schema: dict[Any, list[tuple[int, Any, Any]]] = {}  # schema -> [(cell index, table, bins)]
    for i, c in enumerate(cells):
        table = pa.ipc.open_stream(pa.py_buffer(c)).read_all() if c[:4] == _ARROW_MAGIC else None
        at = -1 if table is None else table.schema.get_field_index(BIN_COLUMN)
        if table is None or at < 0:
            w = where if isinstance(where, str) else where(i)
            raise SparkError(f"{w}: not a binned rows cell (Arrow rows with a {BIN_COLUMN!r} column)")
        bins = table.column(at).to_numpy()
        table = table.remove_column(at)
        by_schema.setdefault(table.schema, []).append((i, table, bins))
    for schema, tables in by_schema.items():
        first = tables[0][0]
        shape = _shape_of(schema, types, where if isinstance(where, str) else functools.partial(where, first))
        recs = rows_to_records(pa.concat_tables([t for _, t, _ in tables]), shape)
        o = 0
        for i, t, bins in tables:
            n = t.num_rows
            if n:
                cut = (np.flatnonzero(bins[1:] != bins[:-1]) + 1).tolist()
                starts, ends = [0, *cut], [*cut, n]
                out[i] = [(int(bins[s0]), recs[o + s0 : o + e0]) for s0, e0 in zip(starts, ends)]
            o += n
    return out


def decode_cells(
    cells: list[Any], types: RecordTypes = BUILTIN, where: "str | Callable[[int], str]" = "a shuffle cell"
) -> list[list[Any]]:
    """The records of many cells (as :func:`decode_records` of each; ``where(i)`` names
    cell ``i`` in errors): Arrow cells of one schema are converted to Python together,
    which is cheaper than one by one."""
    out: list[Any] = [None] * len(cells)
    arrow: dict[Any, list[tuple[int, Any]]] = {}  # schema -> [(cell index, table)]
    for i, c in enumerate(cells):
        if c[:4] == _ARROW_MAGIC:
            import pyarrow as pa

            table = pa.ipc.open_stream(pa.py_buffer(c)).read_all()
            arrow.setdefault(table.schema, []).append((i, table))
        else:
            out[i] = _Codec(types, where if isinstance(where, str) else functools.partial(where, i)).decode(c)
    for schema, tables in arrow.items():
        import pyarrow as pa

        first = tables[0][0]
        shape = _shape_of(schema, types, where if isinstance(where, str) else functools.partial(where, first))
        recs = rows_to_records(pa.concat_tables([t for _, t in tables]), shape)
        o = 0
        for i, t in tables:
            out[i] = recs[o : o + t.num_rows]
            o += t.num_rows
    return out


def decode_rows(data: Any, types: RecordTypes = BUILTIN, where: "str | Callable[[], str]" = "a shuffle cell") -> list[Any]:
    """The records of a cell written by :func:`encode_rows` (a record class rebuilt only
    as a class of ``types``, as :func:`decode_records`)."""
    import pyarrow as pa

    table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    return rows_to_records(table, _shape_of(table.schema, types, where))


def _shape_of(schema: Any, types: RecordTypes, where: "str | Callable[[], str]") -> Shape:
    """The record shape an Arrow cell's metadata names (a class: looked up in ``types``,
    never imported)."""
    meta = schema.metadata or {}
    path = meta.get(_CLASS_KEY)
    if path is None:
        return meta.get(_SHAPE_KEY, b"dict").decode()
    cls = types.get(path.decode())
    return _Codec(types, where)._record_class(path.decode(), cls is not None and issubclass(cls, tuple))
