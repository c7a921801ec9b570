"""Building dataflows: :class:`Dataflow`, :class:`Stream` and the decorator API.

A :class:`Dataflow` is a graph of operators connected by streams.  Streams have
methods for the stateless operators (``map``, ``filter``, ``flat_map``, ``concat``,
``inspect``, ``exchange``) and sinks (``collect``, ``sink``, ``probe``); the
frontier-aware operators are written as decorated functions::

    >>> import tstate as ts
    >>> flow = ts.Dataflow("wordcount")
    >>> lines = flow.input("lines")
    >>> words = lines.flat_map(str.split)
    >>> @flow.unary_frontier(words, exchange=lambda w: w, state=dict)
    ... def count(inp, out, ctx):
    ...     for cap, batch in inp:                 # batches with their capability
    ...         counts = ctx.state.setdefault(cap.time, {})
    ...         for w in batch:
    ...             counts[w] = counts.get(w, 0) + 1
    ...         ctx.notify_at(cap)                 # fires once the frontier passes it
    ...     for cap in ctx.notifications():       # in time order
    ...         out.give_many(cap, sorted(ctx.state.pop(cap.time).items()))
    >>> result = count.collect()
    >>> lines.send(["a b a"]); lines.advance_to(1); lines.send(["b"]); lines.close()
    >>> flow.run(workers=2)
    >>> result.by_time()
    {0: [('a', 2), ('b', 1)], 1: [('b', 1)]}

The decorated name becomes the operator's output :class:`Stream`.  Building a dataflow
only records the graph; :meth:`Dataflow.run` (or :meth:`Dataflow.start` for
step-by-step control) executes it on the embedded engine with N workers.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar

from attrs import define, field

from tstate.errors import ConfigurationError, GraphError, InputClosedError, InputError, ProgressError
from tstate.progress.summary import PathSummary
from tstate.progress.timestamp import TIME_MAX, less_equal, minimum

if TYPE_CHECKING:  # pragma: no cover
    from tstate.engine.execution import Execution
    from tstate.io.sinks import Collected, Sink
    from tstate.operators.base import OperatorRuntime
    from tstate.probe import Probe

__all__ = ["Dataflow", "Stream", "StatefulStream", "InputStream", "Scope", "Feedback", "Exchange"]

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_BINS = 256


@define(frozen=True)
class Exchange:
    """An input's channel contract: route records by ``key`` to the owner of its bin."""

    key: Callable[[Any], Any]
    bins: int = DEFAULT_BINS


@define(eq=False)
class NodeSpec:
    """One operator of the logical graph (internal)."""

    index: int
    name: str
    kind: str
    scope: "Scope"
    inputs: list[Optional[tuple[int, int]]]
    pacts: list[Optional[Exchange]]
    outputs: int
    factory: Callable[["Execution", "NodeSpec", int], "OperatorRuntime"]
    input_depth: Optional[list[int]] = None
    output_depth: Optional[list[int]] = None
    summary: Optional[list[list[list[PathSummary]]]] = None
    options: dict[str, Any] = field(factory=dict)


class Scope:
    """A timestamp scope: the dataflow's root (``int`` times, depth 0) or an iterate
    scope (``Product`` times one level deeper than its parent)."""

    def __init__(
        self, flow: "Dataflow", depth: int, name: str, parent: Optional["Scope"] = None, sequenced: bool = False
    ) -> None:
        self.flow = flow
        self.depth = depth
        self.name = name
        self.parent = parent
        #: epoch-sequenced (see :meth:`Dataflow.iterate`)
        self.sequenced = sequenced
        self._feedbacks: list["Feedback"] = []

    def at(self, epoch: Any, round: int) -> Any:
        """The time of ``round`` of ``epoch`` inside this iterate scope:
        ``Product(epoch, round)``, or in a sequenced scope
        :func:`~tstate.progress.timestamp.sequenced` ``(epoch, round)``."""
        from tstate.progress.timestamp import Product, sequenced

        if self.depth == 0:
            raise GraphError("at() needs an iterate scope")
        return sequenced(epoch, round) if self.sequenced else Product(epoch, round)

    def round_of(self, t: Any) -> int:
        """The round of its epoch that time ``t`` of this scope is (inverse of :meth:`at`)."""
        from tstate.progress.timestamp import sequenced_round

        return sequenced_round(t) if self.sequenced else t.inner  # type: ignore[no-any-return]

    def feedback(self, step: int = 1, max_iterations: Optional[int] = None, name: Optional[str] = None) -> "Feedback":
        """A loop variable: records given to ``feedback.connect(stream)`` re-appear on
        ``feedback.stream`` with the iteration count advanced by ``step``.  With
        ``max_iterations``, records that would pass it (the round of their epoch, in a
        sequenced scope) are dropped (the summary "overflows")."""
        if self.depth == 0:
            raise GraphError("feedback() needs an iterate scope: use it inside @flow.iterate")
        if step < 1:
            raise GraphError(f"feedback step must be >= 1 (a loop must advance time), got {step}")
        from tstate.operators.scope import FeedbackRuntime

        flow = self.flow
        nm = name or f"feedback#{len(flow._nodes)}"
        spec = flow._add_node(
            nm,
            "feedback",
            self,
            inputs=[None],
            pacts=[None],
            outputs=1,
            factory=FeedbackRuntime,
            summary=[[[PathSummary.feedback(self.depth, step)]]],
            options={"step": step, "max_iterations": max_iterations, "sequenced": self.sequenced, "scope": self.name},
        )
        fb = Feedback(self, spec, Stream(flow, spec.index, 0, self))
        self._feedbacks.append(fb)
        return fb

    def __repr__(self) -> str:
        return f"Scope({self.name!r}, depth={self.depth})"


class Feedback:
    """A loop variable of an iterate scope (see :meth:`Scope.feedback`)."""

    def __init__(self, scope: Scope, spec: NodeSpec, stream: "Stream") -> None:
        self.scope = scope
        self._spec = spec
        self.stream = stream

    @property
    def connected(self) -> bool:
        return self._spec.inputs[0] is not None

    def connect(self, stream: "Stream") -> None:
        """Close the loop: records of ``stream`` flow back to :attr:`stream`."""
        if stream.scope is not self.scope:
            raise GraphError(f"feedback {self._spec.name!r}: the stream to connect is from {stream.scope!r}, not {self.scope!r}")
        if self.connected:
            raise GraphError(f"feedback {self._spec.name!r} is already connected")
        self._spec.inputs[0] = (stream.node, stream.port)


class Stream:
    """A stream of records at some scope; the handle operators are built from."""

    __slots__ = ("flow", "node", "port", "scope")

    def __init__(self, flow: "Dataflow", node: int, port: int, scope: Scope) -> None:
        self.flow = flow
        self.node = node
        self.port = port
        self.scope = scope

    @property
    def name(self) -> str:
        return self.flow._nodes[self.node].name

    def __repr__(self) -> str:
        return f"<Stream from {self.name!r}>"

    def origin_source(self) -> Any:
        """The :class:`~tstate.io.sources.Source` whose records this stream carries
        unchanged -- the stream of ``flow.source(src)``, or one derived from it only by
        ``filter``, ``inspect`` and ``exchange`` -- or ``None`` (an input, a ``map``,
        ...).  Operators ask it what the source declares (event time, record type)."""
        nodes = self.flow._nodes
        spec = nodes[self.node]
        while spec.kind in ("filter", "inspect", "exchange") and spec.inputs and spec.inputs[0] is not None:
            spec = nodes[spec.inputs[0][0]]
        return spec.options.get("source") if spec.kind == "source" else None

    # -- stateless operators --------------------------------------------------------
    def map(self, fn: Callable[[Any], Any], name: Optional[str] = None) -> "Stream":
        """Apply ``fn`` to every record."""
        from tstate.operators.stateless import MapRuntime

        return self.flow._unary(self, "map", MapRuntime, name, fn=fn)

    def filter(self, predicate: Callable[[Any], bool], name: Optional[str] = None) -> "Stream":
        """Keep the records for which ``predicate`` is true."""
        from tstate.operators.stateless import FilterRuntime

        return self.flow._unary(self, "filter", FilterRuntime, name, fn=predicate)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: Optional[str] = None) -> "Stream":
        """Replace every record by the records of the iterable ``fn`` returns."""
        from tstate.operators.stateless import FlatMapRuntime

        return self.flow._unary(self, "flat_map", FlatMapRuntime, name, fn=fn)

    def inspect(self, fn: Callable[[Any, Any], Any], name: Optional[str] = None) -> "Stream":
        """Call ``fn(time, record)`` for every record and pass it on unchanged."""
        from tstate.operators.stateless import InspectRuntime

        return self.flow._unary(self, "inspect", InspectRuntime, name, fn=fn)

    def exchange(self, key: Callable[[Any], Any], name: Optional[str] = None, bins: int = DEFAULT_BINS) -> "Stream":
        """Route every record to the worker owning the bin of ``key(record)``."""
        from tstate.operators.stateless import PassRuntime

        return self.flow._unary(self, "exchange", PassRuntime, name, pact=Exchange(key, bins))

    def concat(self, *others: "Stream", name: Optional[str] = None) -> "Stream":
        """Merge this stream with ``others``."""
        return self.flow.concat(self, *others, name=name)

    # -- sinks ------------------------------------------------------------------------
    def collect(self, name: Optional[str] = None) -> "Collected":
        """Collect ``(time, record)`` pairs in memory; returns the :class:`Collected`."""
        from tstate.io.sinks import Collected

        sink = Collected()
        self.flow.sink(self, sink, name=self.flow._name("collect", name))
        return sink

    def sink(self, sink: "Sink | Callable[[Any, list[Any]], Any]", name: Optional[str] = None) -> None:
        """Send the stream to ``sink`` (a :class:`~tstate.io.sinks.Sink`, or a callable
        ``fn(time, records)`` called per batch)."""
        self.flow.sink(self, sink, name=name)

    def probe(self, name: Optional[str] = None) -> "Probe":
        """A :class:`~tstate.probe.Probe` on this stream's frontier."""
        return self.flow.probe(self, name=name)


class StatefulStream(Stream):
    """The output of a stateful operator; also where its timer handler is registered."""

    __slots__ = ()

    def __init__(self, flow: "Dataflow", node: int, scope: Scope) -> None:
        super().__init__(flow, node, 0, scope)

    def on_notify(self, handler: F) -> F:
        """Decorator: ``handler(state, time, ctx)`` runs for each key's timer at ``time``
        once the input frontier passed it (after every record at ``time``)."""
        if self.flow._execution is not None:
            raise GraphError(f"operator {self.name!r}: on_notify must be registered before the dataflow starts")
        self.flow._nodes[self.node].options["handlers"]["on_notify"] = handler
        return handler


class InputStream(Stream):
    """A stream fed from Python: :meth:`send`, :meth:`advance_to`, :meth:`close`.

    The input holds a capability for its current epoch (initially ``0``): records sent
    are stamped with it; ``advance_to(t)`` promises no more records before ``t``
    (moving backwards is a :class:`~tstate.errors.ProgressError`); ``close()`` promises
    no more records at all.  Data sent before the dataflow starts is kept and delivered
    when it does.

    Checked where they are given, naming the input (:class:`~tstate.errors.InputError`):
    times are ``int`` epochs (``advance_to(2.5)``, ``advance_to("7")`` or a tuple are
    refused; numpy integers are taken as ints), and ``send`` takes a batch -- an
    iterable of records -- so a ``str``, ``bytes`` or ``dict`` is refused rather than
    split into characters or keys (send ``[x]`` for one record)."""

    __slots__ = ("_handle",)

    def __init__(self, flow: "Dataflow", node: int, scope: Scope, handle: "InputHandle") -> None:
        super().__init__(flow, node, 0, scope)
        self._handle = handle

    @property
    def time(self) -> Any:
        """The current epoch."""
        return self._handle.time

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def send(self, records: Iterable[Any], time: Any = None) -> None:
        """Send ``records`` (a batch: a list or other iterable of records, not a str,
        bytes or dict) at the current epoch (or at ``time >=`` the current epoch)."""
        self._handle.send(records, time)

    def advance_to(self, time: Any) -> None:
        """Promise that no more records will be sent before ``time``."""
        self._handle.advance_to(time)

    def close(self) -> None:
        """Promise that no more records will be sent (idempotent)."""
        self._handle.close()


class InputHandle:
    """The state of one input, shared by the builder and the running execution."""

    def __init__(self, name: str, batch_size: int) -> None:
        self.name = name
        self.batch_size = batch_size
        self.time: Any = 0
        self.closed = False
        self.queue: list[tuple[Any, list[Any]]] = []
        self.runtime: Optional[Any] = None  # the live InputRuntime, when running

    def _epoch(self, time: Any, what: str) -> int:
        """``time`` as an input's time: an ``int`` epoch (numpy integers too), else
        :class:`~tstate.errors.InputError` naming the input."""
        if type(time) is int:
            t = time
        elif isinstance(time, numbers.Integral) and not isinstance(time, bool):
            t = int(time)
        else:
            raise InputError(
                f"input {self.name!r}: {what}({time!r}): an input's times are int epochs, "
                f"not {type(time).__name__} (round or convert it: e.g. int(t))"
            )
        if t > TIME_MAX:
            raise InputError(f"input {self.name!r}: {what}({time!r}): a time is at most {TIME_MAX}")
        return t

    def send(self, records: Iterable[Any], time: Any = None) -> None:
        if self.closed:
            raise InputClosedError(f"input {self.name!r}: send after close")
        if isinstance(records, (str, bytes, bytearray, memoryview, Mapping)):
            raise InputError(
                f"input {self.name!r}: send({_short(records)}): a {type(records).__name__} is not a batch of "
                f"records; send a list of records (send([x]) for one record)"
            )
        if time is not None:
            time = self._epoch(time, "send at time")
        t = self.time if time is None else time
        if time is not None and not less_equal(self.time, time):
            raise ProgressError(f"input {self.name!r}: cannot send at time {time!r}, the input is at {self.time!r}")
        try:
            recs = records if isinstance(records, list) else list(records)
        except TypeError:
            raise InputError(
                f"input {self.name!r}: send({_short(records)}): a {type(records).__name__} is not a batch of "
                "records (an iterable of records)"
            ) from None
        if recs:
            self.queue.append((t, recs))
            if self.runtime is not None:
                self.runtime.request_activation()

    def advance_to(self, time: Any) -> None:
        if self.closed:
            raise InputClosedError(f"input {self.name!r}: advance_to({time!r}) after close")
        time = self._epoch(time, "advance_to")
        if not less_equal(self.time, time):
            raise ProgressError(f"input {self.name!r}: cannot advance backwards from {self.time!r} to {time!r}")
        self.time = time
        if self.runtime is not None:
            self.runtime.request_activation()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.runtime is not None:
                self.runtime.request_activation()


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


class Dataflow:
    """A dataflow graph and the entry point of the decorator API (see module docs).

    ``name`` names the dataflow in errors and metrics."""

    def __init__(self, name: str = "dataflow") -> None:
        self.name = name
        self._nodes: list[NodeSpec] = []
        self.root = Scope(self, 0, name)
        self._inputs: list[InputHandle] = []
        self._execution: Optional["Execution"] = None
        self._record_types: list[type] = []

    def record_types(self, *classes: type) -> None:
        """Register record classes (top-level attrs classes or named tuples) that the
        dataflow's records may be instances of when they cross a Spark exchange, where
        no state type or type hint of an operator's function names them.  The Spark
        backend rebuilds records only as registered classes, so bytes in its store
        never choose which code runs (:mod:`tstate.spark.record_types`); the embedded
        engine never encodes records and ignores this.

        >>> from tstate.progress.timestamp import Product
        >>> flow = Dataflow("f")
        >>> flow.record_types(Product)
        >>> flow.record_types(dict)
        Traceback (most recent call last):
        ...
        tstate.errors.ConfigurationError: record_types: <class 'dict'> is not an attrs class or named tuple defined at a module's top level; only those cross a Spark exchange by class (map other records to tuples, dicts or such a class)
        """
        from tstate.spark.record_types import check_registrable

        self._record_types.extend(check_registrable(classes))

    # -- graph construction (internal) ---------------------------------------------
    def _add_node(
        self,
        name: str,
        kind: str,
        scope: Scope,
        inputs: list[Optional[tuple[int, int]]],
        pacts: list[Optional[Exchange]],
        outputs: int,
        factory: Callable[["Execution", NodeSpec, int], "OperatorRuntime"],
        summary: Optional[list[list[list[PathSummary]]]] = None,
        input_depth: Optional[list[int]] = None,
        output_depth: Optional[list[int]] = None,
        options: Optional[dict[str, Any]] = None,
    ) -> NodeSpec:
        if self._execution is not None:
            raise GraphError(f"dataflow {self.name!r}: cannot add operator {name!r} after the dataflow started")
        if any(n.name == name for n in self._nodes):
            raise GraphError(f"dataflow {self.name!r}: two operators are named {name!r}")
        spec = NodeSpec(
            len(self._nodes),
            name,
            kind,
            scope,
            inputs,
            pacts,
            outputs,
            factory,
            input_depth,
            output_depth,
            summary,
            options or {},
        )
        self._nodes.append(spec)
        return spec

    def _scope_of(self, streams: Sequence[Stream], what: str) -> Scope:
        if not streams:
            raise GraphError(f"{what}: needs at least one input stream")
        scope = streams[0].scope
        for s in streams:
            if not isinstance(s, Stream):
                raise GraphError(f"{what}: expected a Stream, got {type(s).__name__}")
            if s.flow is not self:
                raise GraphError(f"{what}: stream {s!r} belongs to another dataflow")
            if s.scope is not scope:
                raise GraphError(f"{what}: streams from different scopes ({scope!r} and {s.scope!r}) cannot be combined")
        return scope

    def _name(self, kind: str, name: Optional[str]) -> str:
        return name if name is not None else f"{kind}#{len(self._nodes)}"

    def _fn_name(self, fn: Callable[..., Any], kind: str, name: Optional[str]) -> str:
        """An explicit name, else the decorated function's name (made unique)."""
        if name is not None:
            return name
        base = getattr(fn, "__name__", kind)
        if base == "<lambda>" or any(n.name == base for n in self._nodes):
            return f"{base if base != '<lambda>' else kind}#{len(self._nodes)}"
        return base

    def _unary(
        self,
        stream: Stream,
        kind: str,
        factory: Callable[..., "OperatorRuntime"],
        name: Optional[str],
        pact: Optional[Exchange] = None,
        **options: Any,
    ) -> Stream:
        scope = self._scope_of([stream], kind)
        spec = self._add_node(
            self._name(kind, name), kind, scope, [(stream.node, stream.port)], [pact], 1, factory,
            summary=[[[PathSummary.identity(scope.depth)]]], options=options,
        )
        return Stream(self, spec.index, 0, scope)

    # -- inputs and sources -------------------------------------------------------
    def input(self, name: Optional[str] = None, batch_size: int = 8192) -> InputStream:
        """A new input (see :class:`InputStream`).  Each ``send`` is cut into batches of
        at most ``batch_size`` records, spread round-robin over the workers."""
        from tstate.operators.input import InputRuntime

        if batch_size < 1:
            raise ConfigurationError(f"batch_size must be >= 1, got {batch_size}")
        nm = self._name("input", name)
        handle = InputHandle(nm, batch_size)
        spec = self._add_node(nm, "input", self.root, [], [], 1, InputRuntime, summary=[], options={"handle": handle})
        self._inputs.append(handle)
        return InputStream(self, spec.index, self.root, handle)

    def source(self, source: Any, name: Optional[str] = None) -> Stream:
        """A stream read from ``source``: a :class:`~tstate.io.sources.Source`, or any
        iterable of ``(time, records)`` pairs in non-decreasing time order."""
        from tstate.io.sources import Source, from_batches
        from tstate.operators.input import SourceRuntime

        src = source if isinstance(source, Source) else from_batches(source)
        nm = self._name("source", name)
        spec = self._add_node(nm, "source", self.root, [], [], 1, SourceRuntime, summary=[], options={"source": src})
        return Stream(self, spec.index, 0, self.root)

    # -- combinators --------------------------------------------------------------
    def concat(self, *streams: Stream, name: Optional[str] = None) -> Stream:
        """Merge several streams of the same scope into one."""
        from tstate.operators.stateless import ConcatRuntime

        scope = self._scope_of(streams, "concat")
        n = len(streams)
        spec = self._add_node(
            self._name("concat", name), "concat", scope, [(s.node, s.port) for s in streams], [None] * n, 1,
            ConcatRuntime, summary=[[[PathSummary.identity(scope.depth)]] for _ in range(n)],
        )
        return Stream(self, spec.index, 0, scope)

    # -- the generic frontier-aware operators ---------------------------------------
    def unary_frontier(
        self,
        stream: Stream,
        exchange: Optional[Callable[[Any], Any]] = None,
        name: Optional[str] = None,
        state: Optional[Callable[[], Any]] = None,
        bins: int = DEFAULT_BINS,
    ) -> Callable[[Callable[..., Any]], Stream]:
        """Decorator: ``fn(inp, out, ctx)`` becomes a frontier-aware operator.

        ``inp`` iterates ``(capability, batch)`` pairs and has a ``frontier``; ``out``
        gives records at a capability's time; ``ctx`` has the notificator
        (``notify_at``, ``notifications``), ``state`` (one ``state()`` per worker),
        ``worker`` and ``workers``.  With ``exchange``, records are routed by that key
        first.  The function is called whenever input arrived or a frontier moved."""

        def decorate(fn: Callable[..., Any]) -> Stream:
            from tstate.operators.generic import FrontierRuntime

            scope = self._scope_of([stream], "unary_frontier")
            pact = Exchange(exchange, bins) if exchange is not None else None
            spec = self._add_node(
                self._fn_name(fn, "unary_frontier", name), "unary_frontier", scope,
                [(stream.node, stream.port)], [pact], 1, FrontierRuntime,
                summary=[[[PathSummary.identity(scope.depth)]]], options={"logic": fn, "state": state},
            )
            return Stream(self, spec.index, 0, scope)

        return decorate

    def binary_frontier(
        self,
        left: Stream,
        right: Stream,
        exchange: tuple[Optional[Callable[[Any], Any]], Optional[Callable[[Any], Any]]] = (None, None),
        name: Optional[str] = None,
        state: Optional[Callable[[], Any]] = None,
        bins: int = DEFAULT_BINS,
    ) -> Callable[[Callable[..., Any]], Stream]:
        """Decorator: ``fn(left, right, out, ctx)`` over two inputs (see
        :meth:`unary_frontier`).  Notifications fire when both frontiers passed the time."""

        def decorate(fn: Callable[..., Any]) -> Stream:
            from tstate.operators.generic import FrontierRuntime

            scope = self._scope_of([left, right], "binary_frontier")
            pacts = [Exchange(k, bins) if k is not None else None for k in exchange]
            ident = [PathSummary.identity(scope.depth)]
            spec = self._add_node(
                self._fn_name(fn, "binary_frontier", name), "binary_frontier", scope,
                [(left.node, left.port), (right.node, right.port)], pacts, 1, FrontierRuntime,
                summary=[[ident], [ident]], options={"logic": fn, "state": state},
            )
            return Stream(self, spec.index, 0, scope)

        return decorate

    # -- keyed state --------------------------------------------------------------
    def stateful(
        self,
        stream: Stream,
        key: Callable[[Any], Any],
        state: Any,
        default: Optional[Callable[[], Any]] = None,
        bins: int = DEFAULT_BINS,
        name: Optional[str] = None,
    ) -> Callable[[Callable[..., Any]], "StatefulStream"]:
        """Decorator: ``fn(state, record, ctx)`` over typed per-key state.

        ``state`` declares the type of one key's state (an attrs class, ``int``,
        ``list[int]``, ``dict[str, Route]``, ...); it is checked when the dataflow is
        built.  A key seen for the first time starts from ``default()`` (default: the
        type called with no arguments).  ``fn`` mutates the state in place, or returns
        a new value to replace it.  A state that cannot change in place (``int``,
        ``float``, ``str``, ``bytes``, ``bool``, datetimes, enums, tuples, frozensets and
        frozen attrs classes of such values; ``None`` for an ``Optional`` state) must be
        returned -- return the old value to keep it: returning ``None`` raises
        :class:`~tstate.errors.StateReturnError` naming the operator and key, and a
        function with no ``return <value>`` at all is refused here, when the dataflow
        is built (:func:`tstate.state.declaration.returns_required`).  The ``on_notify``
        handler may return ``None`` to keep any state.  ``ctx`` is a :class:`~tstate.state.context.Context`
        (``emit``, ``time``, ``key``, ``notify_at``, ``clear``).  Records of one key are
        applied in timestamp order.  The decorated name becomes a :class:`StatefulStream`
        whose ``on_notify`` decorator registers the timer handler
        ``handler(state, time, ctx)``.  State lives in ``bins`` bins (a power of two)."""
        return self._stateful(stream, key, state, default, bins, name, fold=False)

    def fold_bins(
        self,
        stream: Stream,
        key: Callable[[Any], Any],
        state: Any,
        default: Optional[Callable[[], Any]] = None,
        bins: int = DEFAULT_BINS,
        name: Optional[str] = None,
    ) -> Callable[[Callable[..., Any]], "StatefulStream"]:
        """Decorator, the lower-level form (Megaphone's ``fold``): ``fn(states, records,
        ctx)`` is called per bin for each batch of records (all at ``ctx.time``, in
        arrival order; batches of one time are applied in time order like every stateful
        operator's) with the bin's ``key -> state`` dict; it may read and write any key
        of the bin.  ``ctx.key`` is ``None``; timers are not available here."""
        return self._stateful(stream, key, state, default, bins, name, fold=True)

    def _stateful(
        self,
        stream: Stream,
        key: Callable[[Any], Any],
        state: Any,
        default: Optional[Callable[[], Any]],
        bins: int,
        name: Optional[str],
        fold: bool,
    ) -> Callable[[Callable[..., Any]], "StatefulStream"]:
        from tstate.errors import StateReturnError
        from tstate.keys import check_bins
        from tstate.state.declaration import default_factory, never_returns_a_value, returns_required
        from tstate.types.schema import analyse

        check_bins(bins)
        if not callable(key):
            raise ConfigurationError(f"stateful: key must be a function of the record, got {key!r}")
        schema = analyse(state)
        new_state = default if default is not None else default_factory(state)
        returns = "never" if fold else returns_required(schema)

        def decorate(fn: Callable[..., Any]) -> "StatefulStream":
            from tstate.operators.stateful import StatefulRuntime

            scope = self._scope_of([stream], "stateful")
            nm = self._fn_name(fn, "stateful", name)
            if returns == "always" and never_returns_a_value(fn):
                raise StateReturnError(
                    f"stateful operator {nm!r}: {fn.__qualname__} never returns a value, but its state type "
                    f"{schema.name} cannot change in place: return the new state (return the old one to keep it)"
                )
            spec = self._add_node(
                nm, "stateful", scope, [(stream.node, stream.port)], [Exchange(key, bins)], 1, StatefulRuntime,
                summary=[[[PathSummary.identity(scope.depth)]]],
                options={
                    "fn": fn, "key": key, "state_type": state, "schema": schema, "new_state": new_state,
                    "bins": bins, "handlers": {}, "fold": fold, "returns": returns,
                },
            )
            return StatefulStream(self, spec.index, scope)

        return decorate

    def state(self, op: "Stream", at: Any = None, format: str = "arrow") -> Any:
        """A consistent snapshot of a stateful operator's state (see
        :func:`tstate.state.query.snapshot`)."""
        from tstate.state.query import snapshot

        if self._execution is None:
            raise GraphError(f"dataflow {self.name!r} has not started: there is no state yet")
        return snapshot(self._execution, op, at=at, format=format)

    def read(self, op: "Stream", key: Any) -> Any:
        """A point read: a copy of ``key``'s current state in stateful operator ``op``
        (``None`` if the key has no state), between steps or after the run."""
        from tstate.state.query import point_read

        if self._execution is None:
            raise GraphError(f"dataflow {self.name!r} has not started: there is no state yet")
        return point_read(self._execution, op, key)

    # -- iterate scopes -----------------------------------------------------------
    def iterate(
        self, *streams: Stream, name: Optional[str] = None, sequenced: bool = False
    ) -> Callable[[Callable[..., Any]], Any]:
        """Decorator: ``body(scope, *entered)`` builds a loop in a new iterate scope.

        Each stream in ``streams`` enters the scope (time ``t`` becomes
        ``Product(t, 0)``); ``body`` creates loop variables with ``scope.feedback()``,
        connects them, and returns the stream (or tuple of streams) that leaves the
        scope (``Product(t, i)`` becomes ``t``).  The decorated name becomes the left
        stream(s).

        ``sequenced=True`` makes the epochs run one after another inside the loop
        (in a scope of the root, whose epochs are ints ``0 <= t <=``
        :data:`~tstate.progress.timestamp.MAX_SEQUENCED_EPOCH`): records entering at
        epoch ``t`` get the time ``scope.at(t, 0)``, round ``k`` of epoch ``t`` is
        ``scope.at(t, k)`` (:data:`~tstate.progress.timestamp.SEQUENCE_SPAN`), and every
        time of epoch ``t - 1`` is ``<=`` every time of epoch ``t``.  A ``@flow.stateful``
        operator in the loop applies a time's records once no earlier time can arrive
        and fires timers in time order, so it starts epoch ``t`` exactly when epoch
        ``t - 1`` is over there -- per-key state carried from one epoch to the next
        (incremental algorithms) without holding anything back.  Plain scopes let
        epochs overlap: round 3 of epoch 5 and round 0 of epoch 6 are incomparable.
        Either way ``execution.metrics.rounds(name)`` counts the rounds of every epoch
        (the distinct times that went around the loop)."""

        def decorate(body: Callable[..., Any]) -> Any:
            from tstate.operators.scope import EnterRuntime, LeaveRuntime

            outer = self._scope_of(streams, "iterate")
            nm = str(name or getattr(body, "__name__", "iterate"))
            if sequenced and outer.depth != 0:
                raise GraphError(f"iterate {nm!r}: a sequenced scope must be in the root scope (int epochs)")
            scope = Scope(self, outer.depth + 1, nm, outer, sequenced=sequenced)
            d = outer.depth
            entered = []
            for s in streams:
                spec = self._add_node(
                    self._name(f"{nm}.enter", None), "enter", scope, [(s.node, s.port)], [None], 1, EnterRuntime,
                    summary=[[[PathSummary.enter(d)]]], input_depth=[d], output_depth=[d + 1],
                    options={"sequenced": sequenced},
                )
                entered.append(Stream(self, spec.index, 0, scope))
            result = body(scope, *entered)
            for fb in scope._feedbacks:
                if not fb.connected:
                    raise GraphError(f"iterate {nm!r}: feedback {fb._spec.name!r} was never connected")
            results = result if isinstance(result, tuple) else (result,)
            left = []
            for r in results:
                if not isinstance(r, Stream) or r.scope is not scope:
                    raise GraphError(f"iterate {nm!r}: the body must return stream(s) of its scope, got {r!r}")
                spec = self._add_node(
                    self._name(f"{nm}.leave", None), "leave", outer, [(r.node, r.port)], [None], 1, LeaveRuntime,
                    summary=[[[PathSummary.leave(d + 1)]]], input_depth=[d + 1], output_depth=[d],
                )
                left.append(Stream(self, spec.index, 0, outer))
            return tuple(left) if isinstance(result, tuple) else left[0]

        return decorate

    # -- sinks and probes ---------------------------------------------------------
    def sink(self, stream: Stream, sink: Any, name: Optional[str] = None) -> None:
        """Send ``stream`` to ``sink`` (see :meth:`Stream.sink`)."""
        from tstate.io.sinks import CallbackSink, Sink
        from tstate.operators.sinks import SinkRuntime

        snk = sink if isinstance(sink, Sink) else CallbackSink(sink)
        scope = self._scope_of([stream], "sink")
        self._add_node(
            self._name("sink", name), "sink", scope, [(stream.node, stream.port)], [None], 0, SinkRuntime,
            summary=[[]], options={"sink": snk},
        )

    def probe(self, stream: Stream, name: Optional[str] = None) -> "Probe":
        """A :class:`~tstate.probe.Probe` reporting the frontier of ``stream``."""
        from tstate.operators.sinks import ProbeRuntime
        from tstate.probe import Probe

        scope = self._scope_of([stream], "probe")
        spec = self._add_node(
            self._name("probe", name), "probe", scope, [(stream.node, stream.port)], [None], 0, ProbeRuntime,
            summary=[[]],
        )
        return Probe(self, spec.index, minimum(scope.depth))

    # -- running --------------------------------------------------------------------
    def start(
        self,
        workers: int = 1,
        max_workers: Optional[int] = None,
        reconfigure: Sequence[tuple[int, Any]] = (),
        checkpoint: Any = None,
    ) -> "Execution":
        """Build and start an execution on ``workers`` logical workers; drive it with
        :meth:`Execution.step` / :meth:`Execution.run`.

        ``max_workers`` sizes the worker pool live rescaling can use (default: enough
        for ``reconfigure``).  ``reconfigure`` lists ``(time, command)`` pairs
        (:class:`~tstate.migration.commands.Rescale`, ``MoveBins``, ``Assign``).
        ``checkpoint`` is a directory or a :class:`~tstate.checkpoint.coordinator.Checkpoints`:
        the execution resumes from its latest committed checkpoint (if any, onto any
        number of workers; ``execution.restored`` says from where) and writes new ones."""
        from tstate.engine.execution import Execution
        from tstate.migration.commands import Assign, MoveBins, Rescale

        if self._execution is not None and not self._execution.finished:
            raise GraphError(f"dataflow {self.name!r} is already running")
        for n, v in (("workers", workers), ("max_workers", max_workers if max_workers is not None else workers)):
            if not isinstance(v, int) or v < 1:
                raise ConfigurationError(f"{n} must be an integer >= 1, got {v!r}")
        pool = max_workers or workers
        for _, cmd in reconfigure:
            if isinstance(cmd, Rescale):
                pool = max(pool, cmd.workers) if max_workers is None else pool
            elif isinstance(cmd, MoveBins) and cmd.moves and max_workers is None:
                pool = max(pool, max(cmd.moves.values()) + 1)
            elif isinstance(cmd, Assign) and cmd.owners and max_workers is None:
                pool = max(pool, max(cmd.owners) + 1)
        ex = Execution(self, workers, pool, checkpoint=checkpoint)
        self._execution = ex
        for t, cmd in sorted(reconfigure, key=lambda p: p[0]):
            ex.reconfigure(cmd, at=t)
        return ex

    def run(
        self,
        workers: Any = 1,
        max_workers: Optional[int] = None,
        reconfigure: Sequence[tuple[int, Any]] = (),
        checkpoint: Any = None,
    ) -> None:
        """Run the dataflow to completion on ``workers`` logical workers (see
        :meth:`start` for ``max_workers`` and ``reconfigure``); the finished execution,
        with its ``metrics``, stays available as :attr:`execution`.

        Every input must be closed by the end (an input still open when nothing else
        can happen is an error, never a hang).

        ``flow.run(backend)`` with a backend instead of a worker count (e.g.
        :class:`tstate.spark.Backend`, whose ``sources`` bind DataFrames to the inputs)
        runs the dataflow there."""
        if not isinstance(workers, int) and hasattr(workers, "run"):  # a backend, e.g. tstate.spark.Backend
            workers.run(self, reconfigure=reconfigure)
            return
        self.start(workers, max_workers=max_workers, reconfigure=reconfigure, checkpoint=checkpoint).run()

    @property
    def execution(self) -> Optional["Execution"]:
        """The current (or last) execution."""
        return self._execution
