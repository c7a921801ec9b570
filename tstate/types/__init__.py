"""Typed state: declarations, schemas, codecs, size accounting, tracked containers.

State is declared by type -- attrs classes, ``TypedDict`` records, ``list``, ``tuple``, ``dict``, ``set``,
scalars, ``Optional``, enums, datetimes, and the tracked containers :class:`Map` and
:class:`Array` -- nested to any depth.  :func:`analyse` checks a declaration and gives
its :class:`Schema` (with a stable fingerprint); :class:`StateCodec` encodes values
(cattrs + msgpack, never pickle), checking them first; :func:`estimated_size` counts
bytes for bin accounting; :func:`to_arrow` exports state for queries, and
:func:`record_type` gives the ``TypedDict`` of a table's rows (from its Arrow schema).

>>> from attrs import define, field
>>> @define
... class Route:
...     flights: int = 0
...     by_hour: Map[int, int] = field(factory=Map)
>>> codec = StateCodec(Route)
>>> r = codec.decode(codec.encode(Route(1)))
>>> r.by_hour[7] = 3
>>> codec.apply_delta(codec.decode(codec.encode(Route(1))), codec.encode_delta(r)) == r
True
"""

from tstate.types.arrow import arrow_schema, python_type, record_type, to_arrow
from tstate.types.codec import StateCodec, decode_envelope, encode_envelope
from tstate.types.schema import FieldSchema, Kind, Schema, analyse, describe
from tstate.types.size import estimated_size
from tstate.types.tracked import Array, ArrayChanges, Map, MapChanges

__all__ = [
    "Map",
    "Array",
    "MapChanges",
    "ArrayChanges",
    "analyse",
    "describe",
    "Schema",
    "FieldSchema",
    "Kind",
    "StateCodec",
    "encode_envelope",
    "decode_envelope",
    "estimated_size",
    "to_arrow",
    "arrow_schema",
    "python_type",
    "record_type",
]
