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

from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

from tstate.errors import ConfigurationError, GraphError
from tstate.io.inputs import InputHandle
from tstate.io.sinks import CallbackSink, Collected, Sink
from tstate.io.sources import Source, from_batches
from tstate.plan import (
    DEFAULT_BINS,
    BinaryFrontier,
    Concat,
    Enter,
    Exchange,
    Filter,
    FlatMap,
    Graph,
    Input,
    Inspect,
    KeyFn,
    Leave,
    Map,
    Node,
    NotifyHandler,
    Stateful,
    UnaryFrontier,
)
from tstate.plan import Feedback as FeedbackNode
from tstate.plan import Probe as ProbeNode
from tstate.plan import Scope as PlanScope
from tstate.plan import Sink as SinkNode
from tstate.plan import Source as SourceNode
from tstate.plan.records import check_registrable
from tstate.plan.stateful import FoldFn, StatefulFn
from tstate.probe import Probe
from tstate.runner import Runner, Runs
from tstate.progress.timestamp import minimum

__all__ = ["Dataflow", "Stream", "StatefulStream", "InputStream", "Scope", "Feedback", "InputHandle"]

F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H", bound=NotifyHandler)


class Scope:
    """A timestamp scope of a dataflow being built: the root (``int`` times, depth 0)
    or an iterate scope (``Product`` times one level deeper than its parent).  The
    scope itself is :attr:`plan` (:class:`tstate.plan.Scope`); this handle adds what
    building needs (:meth:`feedback`)."""

    def __init__(self, flow: "Building", plan: PlanScope, parent: Optional["Scope"] = None) -> None:
        self.flow = flow
        #: the plan's scope value
        self.plan = plan
        self.parent = parent
        self._feedbacks: list["Feedback"] = []

    @property
    def depth(self) -> int:
        return self.plan.depth

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def sequenced(self) -> bool:
        """Epoch-sequenced (see :meth:`Dataflow.iterate`)."""
        return self.plan.sequenced

    def at(self, epoch: Any, round: int) -> Any:
        """The time of ``round`` of ``epoch`` inside this iterate scope:
        ``Product(epoch, round)``, or in a sequenced scope
        :func:`~tstate.progress.timestamp.sequenced` ``(epoch, round)``."""
        return self.plan.at(epoch, round)

    def round_of(self, t: Any) -> int:
        """The round of its epoch that time ``t`` of this scope is (inverse of :meth:`at`)."""
        return self.plan.round_of(t)

    def feedback(self, step: int = 1, max_iterations: Optional[int] = None, name: Optional[str] = None) -> "Feedback":
        """A loop variable: records given to ``feedback.connect(stream)`` re-appear on
        ``feedback.stream`` with the iteration count advanced by ``step``.

        :arg step: how many rounds later they come back (>= 1: a loop must advance time).
        :arg max_iterations: records that would pass this round of their epoch are dropped
            (the summary "overflows"; None: no limit).
        :arg name: the feedback's name (default ``feedback#N``).
        :returns: a :class:`Feedback`: its ``stream`` to read, ``connect(stream)`` to close
            the loop (see :meth:`Dataflow.iterate` for an example).
        """
        if self.depth == 0:
            raise GraphError("feedback() needs an iterate scope: use it inside @flow.iterate")
        if step < 1:
            raise GraphError(f"feedback step must be >= 1 (a loop must advance time), got {step}")
        flow = self.flow
        nm = name or f"feedback#{len(flow.graph)}"
        node = FeedbackNode(name=nm, scope=self.plan, step=step, max_iterations=max_iterations)
        index = flow._add(node, [None], later=[0])
        fb = Feedback(self, index, Stream(flow, index, 0, self))
        self._feedbacks.append(fb)
        return fb

    def __repr__(self) -> str:
        return f"Scope({self.name!r}, depth={self.depth})"


class Feedback:
    """A loop variable of an iterate scope (see :meth:`Scope.feedback`)."""

    def __init__(self, scope: Scope, node: int, stream: "Stream") -> None:
        self.scope = scope
        self.node = node
        self.stream = stream

    @property
    def name(self) -> str:
        return self.scope.flow.graph[self.node].name

    @property
    def connected(self) -> bool:
        return self.scope.flow.graph.sources(self.node)[0] is not None

    def connect(self, stream: "Stream") -> None:
        """Close the loop: records of ``stream`` flow back to :attr:`stream`."""
        if stream.scope is not self.scope:
            raise GraphError(f"feedback {self.name!r}: the stream to connect is from {stream.scope!r}, not {self.scope!r}")
        if self.connected:
            raise GraphError(f"feedback {self.name!r} is already connected")
        self.scope.flow.graph.connect(self.node, 0, (stream.node, stream.port))


class Stream:
    """A stream of records at some scope; the handle operators are built from."""

    __slots__ = ("flow", "node", "port", "scope")

    def __init__(self, flow: "Building", node: int, port: int, scope: Scope) -> None:
        self.flow = flow
        self.node = node
        self.port = port
        self.scope = scope

    @property
    def name(self) -> str:
        return self.flow.graph[self.node].name

    def __repr__(self) -> str:
        return f"<Stream from {self.name!r}>"

    def origin_source(self) -> Any:
        """The :class:`~tstate.io.sources.Source` whose records this stream carries
        unchanged -- the stream of ``flow.source(src)``, or one derived from it only by
        ``filter``, ``inspect`` and ``exchange`` -- or ``None`` (an input, a ``map``,
        ...).  Operators ask it what the source declares (event time, record type)."""
        graph = self.flow.graph
        i = self.node
        while isinstance(graph[i], (Filter, Inspect, Exchange)):
            i = graph.source(i)[0]
        node = graph[i]
        return node.source if isinstance(node, SourceNode) else None

    # -- stateless operators --------------------------------------------------------
    def map(self, fn: Callable[[Any], Any], name: Optional[str] = None) -> "Stream":
        """Apply ``fn`` to every record.

        :arg fn: ``fn(record)`` gives the record that replaces it.
        :arg name: the operator's name (default ``map#N``); unique in the dataflow.
        :returns: the stream of the results, each at its record's time.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("map")
        >>> nums = flow.input("nums")
        >>> out = nums.map(lambda x: x * 10).collect()
        >>> nums.send([1, 2]); nums.close(); flow.run()
        >>> out.records()
        [10, 20]
        """
        return self.flow._unary(self, Map, name, fn=fn)

    def filter(self, predicate: Callable[[Any], bool], name: Optional[str] = None) -> "Stream":
        """Keep the records for which ``predicate`` is true.

        :arg predicate: ``predicate(record)``: keep the record if true.
        :arg name: the operator's name (default ``filter#N``).
        :returns: the stream of the records kept, at their times, in their order.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("filter")
        >>> nums = flow.input("nums")
        >>> out = nums.filter(lambda x: x % 2 == 0).collect()
        >>> nums.send(range(6)); nums.close(); flow.run()
        >>> out.records()
        [0, 2, 4]
        """
        return self.flow._unary(self, Filter, name, predicate=predicate)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: Optional[str] = None) -> "Stream":
        """Replace every record by the records of the iterable ``fn`` returns.

        :arg fn: ``fn(record)`` gives an iterable of records (empty: the record is dropped).
        :arg name: the operator's name (default ``flat_map#N``).
        :returns: the stream of every record of every iterable, at the time of the record it
            came from.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("flat_map")
        >>> lines = flow.input("lines")
        >>> out = lines.flat_map(str.split).collect()
        >>> lines.send(["to be", "or not"]); lines.close(); flow.run()
        >>> out.records()
        ['to', 'be', 'or', 'not']
        """
        return self.flow._unary(self, FlatMap, name, fn=fn)

    def inspect(self, fn: Callable[[Any, Any], Any], name: Optional[str] = None) -> "Stream":
        """Call ``fn(time, record)`` for every record and pass it on unchanged.

        :arg fn: ``fn(time, record)``, called for its side effect (its result is ignored).
        :arg name: the operator's name (default ``inspect#N``).
        :returns: the same stream.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("inspect")
        >>> nums = flow.input("nums")
        >>> seen = []
        >>> out = nums.inspect(lambda t, x: seen.append((t, x))).collect()
        >>> nums.send([7]); nums.advance_to(3); nums.send([8]); nums.close(); flow.run()
        >>> seen, out.records()
        ([(0, 7), (3, 8)], [7, 8])
        """
        return self.flow._unary(self, Inspect, name, fn=fn)

    def exchange(self, key: KeyFn, name: Optional[str] = None, bins: int = DEFAULT_BINS) -> "Stream":
        """Route every record to the worker owning the bin of ``key(record)``.

        Records with equal keys meet on one worker (the one owning their bin among ``bins``),
        which is what a frontier operator downstream that groups by key needs.

        :arg key: ``key(record)`` gives a hashable key (:mod:`tstate.keys`).
        :arg name: the operator's name (default ``exchange#N``).
        :arg bins: how many bins the keys are spread over (a power of two).
        :returns: the same records, each on its key's worker.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("exchange")
        >>> words = flow.input("words")
        >>> where = []
        >>> @flow.unary_frontier(words.exchange(lambda w: w))
        ... def tag(inp, out, ctx):
        ...     for cap, batch in inp:
        ...         where.extend((w, ctx.worker) for w in batch)
        >>> words.send(["a", "b", "a", "b", "a"]); words.close(); flow.run(workers=4)
        >>> len({w for w, _ in where if w == "a"}), len(set(where))   # each word on one worker
        (1, 2)
        """
        return self.flow._unary(self, Exchange, name, key=key, bins=bins)

    def concat(self, *others: "Stream", name: Optional[str] = None) -> "Stream":
        """Merge this stream with ``others`` (same scope).

        :arg others: streams of this stream's scope.
        :arg name: the operator's name (default ``concat#N``).
        :returns: one stream of every record of each, at their times.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("concat")
        >>> a, b = flow.input("a"), flow.input("b")
        >>> out = a.concat(b).collect()
        >>> a.send([1]); b.send([2]); a.close(); b.close(); flow.run()
        >>> sorted(out.records())
        [1, 2]
        """
        return self.flow.concat(self, *others, name=name)

    # -- sinks ------------------------------------------------------------------------
    def collect(self, name: Optional[str] = None) -> Collected:
        """Collect the stream's records in memory.

        :arg name: the sink's name (default ``collect#N``).
        :returns: a :class:`~tstate.io.sinks.Collected`: ``records()``, ``by_time()`` and
            ``items`` (``(time, record)`` pairs), filled as the dataflow runs.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("collect")
        >>> nums = flow.input("nums")
        >>> out = nums.collect()
        >>> nums.send([1]); nums.advance_to(2); nums.send([2, 3]); nums.close(); flow.run()
        >>> out.by_time()
        {0: [1], 2: [2, 3]}
        """
        sink = Collected()
        self.flow.sink(self, sink, name=self.flow._name("collect", name))
        return sink

    def sink(self, sink: "Sink | Callable[[Any, list[Any]], Any]", name: Optional[str] = None) -> None:
        """Send the stream to ``sink``.

        :arg sink: a :class:`~tstate.io.sinks.Sink` (e.g. ``ts.io.files(dir)``: one file per
            epoch, exactly once with checkpoints), or a callable ``fn(time, records)`` called
            per batch.
        :arg name: the sink's name (default ``sink#N``).
        :returns: nothing: a sink ends the stream.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("sink")
        >>> nums = flow.input("nums")
        >>> got = []
        >>> nums.map(str).sink(lambda t, recs: got.append((t, recs)))
        >>> nums.send([1, 2]); nums.close(); flow.run()
        >>> got
        [(0, ['1', '2'])]
        """
        self.flow.sink(self, sink, name=name)

    def probe(self, name: Optional[str] = None) -> Probe:
        """A :class:`~tstate.probe.Probe` on this stream's frontier.

        :arg name: the probe's name (default ``probe#N``).
        :returns: the probe: ``less_than(t)`` is true while records before ``t`` may still
            arrive here (drive a dataflow step by step with it).

        >>> import tstate as ts
        >>> flow = ts.Dataflow("probe")
        >>> nums = flow.input("nums")
        >>> probe = nums.probe()
        >>> ex = flow.start()
        >>> nums.advance_to(5); ex.step_while(lambda: probe.less_than(5))
        >>> probe.less_than(5), probe.done()
        (False, False)
        """
        return self.flow.probe(self, name=name)


class StatefulStream(Stream):
    """The output of a stateful operator; also where its timer handler is registered."""

    __slots__ = ()

    def __init__(self, flow: "Building", node: int, scope: Scope) -> None:
        super().__init__(flow, node, 0, scope)

    def on_notify(self, handler: H) -> H:
        """Decorator: register the operator's timer handler.

        ``handler(state, time, ctx)`` runs for each key with a timer at ``time``
        (``ctx.notify_at(time)``) once the input frontier passed it -- after every record at
        ``time`` and before any later one -- with the key's state; timers fire in time order,
        once per key and time.  It may emit (``ctx.emit``), set later timers, clear the key,
        and return the new state (None: keep it).  Register it before the dataflow starts.

        :arg handler: a :class:`~tstate.plan.stateful.NotifyHandler`.
        :returns: ``handler``, unchanged.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("timers")
        >>> clicks = flow.input("clicks")
        >>> @flow.stateful(clicks, key=lambda page: page, state=int)
        ... def count(n: int, page: str, ctx: ts.Context) -> int:
        ...     ctx.notify_at(ctx.time + 1)          # report one epoch later
        ...     return n + 1
        >>> @count.on_notify
        ... def report(n: int, time: int, ctx: ts.Context) -> None:
        ...     ctx.emit((ctx.key, n))
        >>> out = count.collect()
        >>> clicks.send(["a", "b", "a"]); clicks.close(); flow.run()
        >>> sorted(out.by_time()[1])
        [('a', 2), ('b', 1)]
        """
        if self.flow._runner.started:
            raise GraphError(f"operator {self.name!r}: on_notify must be registered before the dataflow starts")
        node = self.flow.graph[self.node]
        assert isinstance(node, Stateful)
        self.flow.graph.replace(self.node, node.with_on_notify(handler))
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

    def __init__(self, flow: "Building", node: int, scope: Scope, handle: InputHandle) -> None:
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


class Building(Runs):
    """What every family of operators of :class:`Dataflow` builds on (a base class of
    it): the plan being built (:attr:`graph`, the root scope, the registered record
    classes); adding a node to it (refused once the dataflow started), the scope of the
    streams an operator combines, default names; and the operators a dataflow begins
    and ends with: inputs, sources, ``concat``, sinks and probes."""

    def __init__(self, name: str = "dataflow") -> None:
        self.name = name
        #: the plan being built
        self.graph = Graph(name)
        self.root = Scope(self, self.graph.root)
        #: runs what this builds (tstate.runner): the builder and the running apart
        self._runner = Runner(self)
        self._record_types: list[type] = []

    @property
    def inputs(self) -> list[InputHandle]:
        """The handles of the dataflow's inputs, in the order they were made."""
        return [n.handle for _, n in self.graph.of_type(Input)]

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
        self._record_types.extend(check_registrable(classes))

    @property
    def registered_record_types(self) -> tuple[type, ...]:
        """The classes given to :meth:`record_types`."""
        return tuple(self._record_types)

    # -- graph construction (internal) ---------------------------------------------
    def _add(self, node: Node, sources: Sequence[Optional[tuple[int, int]]], later: Sequence[int] = ()) -> int:
        if self._runner.started:
            raise GraphError(f"dataflow {self.name!r}: cannot add operator {node.name!r} after the dataflow started")
        return self.graph.add(node, sources, later=later)

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
        return name if name is not None else f"{kind}#{len(self.graph)}"

    def _fn_name(self, fn: Callable[..., Any], kind: str, name: Optional[str]) -> str:
        """An explicit name, else the decorated function's name (made unique)."""
        if name is not None:
            return name
        base = getattr(fn, "__name__", kind)
        taken = {n.name for n in self.graph.nodes}
        if base == "<lambda>" or base in taken:
            return f"{base if base != '<lambda>' else kind}#{len(self.graph)}"
        return base

    def _unary(self, stream: Stream, cls: type[Node], name: Optional[str], **settings: Any) -> Stream:
        scope = self._scope_of([stream], cls.kind)
        node = cls(name=self._name(cls.kind, name), scope=scope.plan, **settings)
        return Stream(self, self._add(node, [(stream.node, stream.port)]), 0, scope)

    # -- inputs and sources -------------------------------------------------------
    def input(self, name: Optional[str] = None, batch_size: int = 8192) -> InputStream:
        """A new input fed from Python (see :class:`InputStream`).

        :arg name: the input's name (default ``input#N``); the Spark backend binds a DataFrame
            to it by this name.
        :arg batch_size: each ``send`` is cut into batches of at most this many records,
            spread round-robin over the workers.
        :returns: an :class:`InputStream`: ``send``, ``advance_to``, ``close``.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("input")
        >>> nums = flow.input("nums", batch_size=2)
        >>> out = nums.collect()
        >>> nums.send([1, 2, 3]); nums.advance_to(1); nums.send([4]); nums.close()
        >>> flow.run(workers=2); out.by_time()
        {0: [1, 2, 3], 1: [4]}
        """
        if batch_size < 1:
            raise ConfigurationError(f"batch_size must be >= 1, got {batch_size}")
        nm = self._name("input", name)
        handle = InputHandle(nm, batch_size)
        index = self._add(Input(name=nm, scope=self.root.plan, handle=handle), [])
        return InputStream(self, index, self.root, handle)

    def source(self, source: Any, name: Optional[str] = None) -> Stream:
        """A stream read from ``source``, one batch per activation, replayable from a
        checkpoint's recorded position.

        :arg source: a :class:`~tstate.io.sources.Source` (``ts.io.parquet(...)``,
            ``ts.io.csv(...)``), or an iterable of ``(time, records)`` pairs in non-decreasing
            time order.
        :arg name: the source's name (default ``source#N``); checkpoints record its position
            under it.
        :returns: the stream of its records at their times.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("source")
        >>> out = flow.source([(0, ["a"]), (2, ["b", "c"])]).collect()
        >>> flow.run(); out.by_time()
        {0: ['a'], 2: ['b', 'c']}
        """
        src = source if isinstance(source, Source) else from_batches(source)
        nm = self._name("source", name)
        index = self._add(SourceNode(name=nm, scope=self.root.plan, source=src), [])
        return Stream(self, index, 0, self.root)

    # -- combinators --------------------------------------------------------------
    def concat(self, *streams: Stream, name: Optional[str] = None) -> Stream:
        """Merge several streams of the same scope into one (see :meth:`Stream.concat`).

        :arg streams: the streams, all of one scope.
        :arg name: the operator's name (default ``concat#N``).
        :returns: one stream of all their records, at their times.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("concat")
        >>> a, b, c = flow.input("a"), flow.input("b"), flow.input("c")
        >>> out = flow.concat(a, b, c).collect()
        >>> for i, s in enumerate((a, b, c)): s.send([i]); s.close()
        >>> flow.run(); sorted(out.records())
        [0, 1, 2]
        """
        scope = self._scope_of(streams, "concat")
        node = Concat(name=self._name("concat", name), scope=scope.plan, inputs=len(streams))
        return Stream(self, self._add(node, [(s.node, s.port) for s in streams]), 0, scope)

    # -- sinks and probes ---------------------------------------------------------
    def sink(self, stream: Stream, sink: Any, name: Optional[str] = None) -> None:
        """Send ``stream`` to ``sink`` (see :meth:`Stream.sink`)."""
        snk = sink if isinstance(sink, Sink) else CallbackSink(sink)
        scope = self._scope_of([stream], "sink")
        self._add(SinkNode(name=self._name("sink", name), scope=scope.plan, sink=snk), [(stream.node, stream.port)])

    def probe(self, stream: Stream, name: Optional[str] = None) -> Probe:
        """A :class:`~tstate.probe.Probe` reporting the frontier of ``stream``."""
        scope = self._scope_of([stream], "probe")
        index = self._add(ProbeNode(name=self._name("probe", name), scope=scope.plan), [(stream.node, stream.port)])
        return Probe(self, index, minimum(scope.depth))



class FrontierOperators(Building):
    """The generic frontier-aware operators of :class:`Dataflow` (a base class of it):
    ``unary_frontier`` and ``binary_frontier``."""

    # -- the generic frontier-aware operators ---------------------------------------
    def unary_frontier(
        self,
        stream: Stream,
        exchange: Optional[KeyFn] = None,
        name: Optional[str] = None,
        state: Optional[Callable[[], Any]] = None,
        bins: int = DEFAULT_BINS,
    ) -> Callable[[Callable[..., Any]], Stream]:
        """Decorator: ``fn(inp, out, ctx)`` becomes a frontier-aware operator.

        The function is called whenever input arrived or the input frontier moved.  ``inp``
        iterates ``(capability, batch)`` pairs and has a ``frontier``; ``out`` gives records at
        a capability's time (``give``, ``give_many``); ``ctx`` has the notificator
        (``notify_at``, ``notifications``: in time order, once the frontier passed them),
        ``state`` (one ``state()`` per worker), ``worker`` and ``workers``
        (:mod:`tstate.operators.generic`).

        :arg stream: the input stream.
        :arg exchange: ``key(record)``: route records by key first (None: where they are).
        :arg name: the operator's name (default: the function's name).
        :arg state: makes each worker's state object (None: none; such state is not
            checkpointed: keep state in :meth:`stateful` to use checkpoints).
        :arg bins: bins of the exchange (a power of two).
        :returns: the decorated name becomes the operator's output :class:`Stream`.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("batches")
        >>> nums = flow.input("nums")
        >>> @flow.unary_frontier(nums, state=dict)
        ... def sums(inp, out, ctx):
        ...     for cap, batch in inp:
        ...         ctx.state[cap.time] = ctx.state.get(cap.time, 0) + sum(batch)
        ...         ctx.notify_at(cap)
        ...     for cap in ctx.notifications():             # the time is complete
        ...         out.give(cap, ctx.state.pop(cap.time))
        >>> out = sums.collect()
        >>> nums.send([1, 2]); nums.advance_to(1); nums.send([5]); nums.close(); flow.run()
        >>> out.by_time()
        {0: [3], 1: [5]}
        """

        def decorate(fn: Callable[..., Any]) -> Stream:
            scope = self._scope_of([stream], "unary_frontier")
            node = UnaryFrontier(
                name=self._fn_name(fn, "unary_frontier", name), scope=scope.plan, logic=fn, exchange=(exchange,),
                state=state, bins=bins,
            )
            return Stream(self, self._add(node, [(stream.node, stream.port)]), 0, scope)

        return decorate

    def binary_frontier(
        self,
        left: Stream,
        right: Stream,
        exchange: tuple[Optional[KeyFn], Optional[KeyFn]] = (None, None),
        name: Optional[str] = None,
        state: Optional[Callable[[], Any]] = None,
        bins: int = DEFAULT_BINS,
    ) -> Callable[[Callable[..., Any]], Stream]:
        """Decorator: ``fn(left, right, out, ctx)`` over two inputs (see
        :meth:`unary_frontier`); notifications fire once both frontiers passed the time.

        :arg left: the first input stream.
        :arg right: the second input stream (same scope).
        :arg exchange: per input, a key to route its records by (None: not exchanged).
        :arg name: the operator's name (default: the function's name).
        :arg state: makes each worker's state object (None: none).
        :arg bins: bins of the exchanges (a power of two).
        :returns: the decorated name becomes the operator's output :class:`Stream`.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("join")
        >>> names, ages = flow.input("names"), flow.input("ages")
        >>> @flow.binary_frontier(names, ages, exchange=(lambda r: r[0], lambda r: r[0]), state=dict)
        ... def join(left, right, out, ctx):
        ...     for port, inp in enumerate((left, right)):
        ...         for cap, batch in inp:
        ...             for k, v in batch:
        ...                 ctx.state.setdefault(k, [None, None])[port] = v
        ...             ctx.notify_at(cap)
        ...     for cap in ctx.notifications():
        ...         out.give_many(cap, sorted((k, *v) for k, v in ctx.state.items()))
        ...         ctx.state.clear()
        >>> out = join.collect()
        >>> names.send([(1, "ann")]); ages.send([(1, 31)]); names.close(); ages.close(); flow.run(workers=2)
        >>> out.records()
        [(1, 'ann', 31)]
        """

        def decorate(fn: Callable[..., Any]) -> Stream:
            scope = self._scope_of([left, right], "binary_frontier")
            node = BinaryFrontier(
                name=self._fn_name(fn, "binary_frontier", name), scope=scope.plan, logic=fn,
                exchange=tuple(exchange), state=state, bins=bins,
            )
            return Stream(self, self._add(node, [(left.node, left.port), (right.node, right.port)]), 0, scope)

        return decorate


class KeyedOperators(Building):
    """The operators over typed per-key state of :class:`Dataflow` (a base class of
    it): ``stateful`` and ``fold_bins``."""

    # -- keyed state --------------------------------------------------------------
    def stateful(
        self, stream: Stream, key: KeyFn, state: Any, default: Optional[Callable[[], Any]] = None,
        bins: int = DEFAULT_BINS, name: Optional[str] = None, local_rounds: bool = False,
    ) -> Callable[[StatefulFn], "StatefulStream"]:
        """Decorator: ``fn(state, record, ctx)`` over typed per-key state.

        Records are routed by ``key`` to the worker owning the key's bin; each key's records
        are applied in timestamp order.  ``fn`` mutates the key's state in place, or returns
        a new value to replace it.  A state that cannot change in place (``int``, ``float``,
        ``str``, ``bytes``, ``bool``, datetimes, enums, tuples, frozensets and frozen attrs
        classes of such values; ``None`` for an ``Optional`` state) must be returned --
        return the old value to keep it: returning ``None`` raises
        :class:`~tstate.errors.StateReturnError` naming the operator and key, and a function
        with no ``return <value>`` at all is refused when the dataflow is built
        (:func:`tstate.state.declaration.returns_required`).  ``ctx`` is a
        :class:`~tstate.state.context.Context` (``emit``, ``time``, ``key``, ``notify_at``,
        ``clear``); timers set with ``notify_at`` run the ``on_notify`` handler
        (:meth:`StatefulStream.on_notify`).

        :arg stream: the input stream.
        :arg key: ``key(record)`` gives the record's key (hashable: :mod:`tstate.keys`).
        :arg state: the type of one key's state (an attrs class, ``int``, ``list[int]``,
            ``dict[str, Route]``, a ``TypedDict``, ``tstate.types.Map``, ...), checked when the
            dataflow is built (:class:`~tstate.errors.StateTypeError` naming the field path).
        :arg default: makes a new key's state (default: the type called with no arguments).
        :arg bins: how many bins the keys are spread over (a power of two): the unit of
            checkpoints and migration.
        :arg name: the operator's name (default: the function's name); checkpoints record its
            state under it.
        :arg local_rounds: inside an iterate scope, the operator's promise that its results
            depend on which records each key gets, not on the round they arrive in (a
            minimum label, a sum to a fixed point): what it emits that comes back to it
            through the loop, to a key whose bin its worker holds, is then applied at once
            -- at the time it was emitted, pass after pass within the round -- and only
            records for other workers' bins go around the loop (one round per exchange
            really needed; ``flow.metrics.rounds(scope)`` counts them,
            ``flow.metrics.local_passes(name)`` the passes).  The way back may hold only
            ``map``/``filter``/``flat_map``/``inspect``/``exchange``/``concat`` and one
            feedback without ``max_iterations`` (:mod:`tstate.plan.local_rounds`; else a
            :class:`~tstate.errors.GraphError` when the run starts).  A record applied
            early also comes before the timers of its time.  The embedded engine only: the
            Spark backend runs such an operator round by round (the same results, by the
            promise).
        :returns: the decorated name becomes a :class:`StatefulStream` of what ``fn`` and the
            handler emit, at the times they run.  ``fn`` is a
            :class:`~tstate.plan.stateful.StatefulFn`.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("counts")
        >>> words = flow.input("words")
        >>> @flow.stateful(words, key=lambda w: w, state=int)
        ... def count(n: int, w: str, ctx: ts.Context) -> int:
        ...     ctx.emit((w, n + 1))
        ...     return n + 1
        >>> out = count.collect()
        >>> words.send(["a", "b", "a"]); words.close(); flow.run(workers=2)
        >>> sorted(out.records()), sorted(flow.state(count, format="dict").items())
        ([('a', 1), ('a', 2), ('b', 1)], [('a', 2), ('b', 1)])
        """
        return self._stateful(stream, key, state, default, bins, name, fold=False, local_rounds=local_rounds)

    def fold_bins(
        self,
        stream: Stream,
        key: KeyFn,
        state: Any,
        default: Optional[Callable[[], Any]] = None,
        bins: int = DEFAULT_BINS,
        name: Optional[str] = None,
        local_rounds: bool = False,
    ) -> Callable[[FoldFn], "StatefulStream"]:
        """Decorator, the lower-level form (Megaphone's ``fold``): ``fn(states, records,
        ctx)`` per bin and batch.

        ``fn`` is called for each batch of records of one bin (all at ``ctx.time``, in arrival
        order; the batches of one time in time order, like every stateful operator's) with the
        bin's ``key -> state`` dict; it may read and write any key of the bin.  ``ctx.key`` is
        ``None``; timers are not available here.

        :arg stream: the input stream.
        :arg key: ``key(record)`` gives the key that decides the record's bin.
        :arg state: the type of one key's state (see :meth:`stateful`).
        :arg default: makes a new key's state (default: the type called with no arguments).
        :arg bins: how many bins (a power of two).
        :arg name: the operator's name (default: the function's name).
        :arg local_rounds: apply what comes back to this worker's bins within the round
            (see :meth:`stateful`).
        :returns: the decorated name becomes a :class:`StatefulStream` of what ``fn`` emits.
            ``fn`` is a :class:`~tstate.plan.stateful.FoldFn`.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("fold")
        >>> nums = flow.input("nums")
        >>> @flow.fold_bins(nums, key=lambda x: x % 3, state=int, bins=1)
        ... def sums(states: dict, xs: list, ctx: ts.Context) -> None:
        ...     for x in xs:
        ...         states[x % 3] = states.get(x % 3, 0) + x
        >>> nums.send(range(7)); nums.close(); flow.run()
        >>> sorted(flow.state(sums, format="dict").items())
        [(0, 9), (1, 5), (2, 7)]
        """
        return self._stateful(stream, key, state, default, bins, name, fold=True, local_rounds=local_rounds)

    def _stateful(
        self,
        stream: Stream,
        key: KeyFn,
        state: Any,
        default: Optional[Callable[[], Any]],
        bins: int,
        name: Optional[str],
        fold: bool,
        local_rounds: bool = False,
    ) -> Callable[[Any], "StatefulStream"]:
        Stateful.check(key, state, default, bins, fold)  # refused here, before a function is given

        def decorate(fn: Any) -> "StatefulStream":
            scope = self._scope_of([stream], "stateful")
            nm = self._fn_name(fn, "stateful", name)
            node = Stateful.declare(nm, scope.plan, fn, key, state, default, bins, fold, local_rounds)
            return StatefulStream(self, self._add(node, [(stream.node, stream.port)]), scope)

        return decorate


class IterateScopes(Building):
    """Loops: the iterate scopes of :class:`Dataflow` (a base class of it)."""

    # -- iterate scopes -----------------------------------------------------------
    def iterate(
        self, *streams: Stream, name: Optional[str] = None, sequenced: bool = False
    ) -> Callable[[Callable[..., Any]], Any]:
        """Decorator: ``body(scope, *entered)`` builds a loop in a new iterate scope.

        Each stream in ``streams`` enters the scope (time ``t`` becomes ``Product(t, 0)``);
        ``body`` creates loop variables with :meth:`Scope.feedback`, connects them, and returns
        the stream (or tuple of streams) that leaves the scope (``Product(t, i)`` becomes
        ``t``).

        ``sequenced=True`` makes the epochs run one after another inside the loop (in a scope
        of the root, whose epochs are ints ``0 <= t <=``
        :data:`~tstate.progress.timestamp.MAX_SEQUENCED_EPOCH`): records entering at epoch
        ``t`` get the time ``scope.at(t, 0)``, round ``k`` of epoch ``t`` is ``scope.at(t, k)``
        (:data:`~tstate.progress.timestamp.SEQUENCE_SPAN`), and every time of epoch ``t - 1``
        is ``<=`` every time of epoch ``t``.  A ``@flow.stateful`` operator in the loop applies
        a time's records once no earlier time can arrive and fires timers in time order, so it
        starts epoch ``t`` exactly when epoch ``t - 1`` is over there -- per-key state carried
        from one epoch to the next (incremental algorithms) without holding anything back.
        Plain scopes let epochs overlap: round 3 of epoch 5 and round 0 of epoch 6 are
        incomparable.  Either way ``flow.metrics.rounds(name)`` counts the rounds of every epoch
        (the distinct times that went around the loop).

        :arg streams: the streams entering the loop (one scope).
        :arg name: the scope's name (default: the body's name).
        :arg sequenced: run the epochs one after another inside the loop (see above).
        :returns: the decorated name becomes the stream (or tuple of streams) leaving the loop.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("halving")
        >>> nums = flow.input("nums")
        >>> @flow.iterate(nums)
        ... def halved(scope, xs):
        ...     back = scope.feedback()
        ...     again = xs.concat(back.stream).map(lambda x: x // 2)
        ...     back.connect(again.filter(lambda x: x > 1))
        ...     return again
        >>> out = halved.collect()
        >>> nums.send([20]); nums.close(); flow.run()
        >>> out.records()
        [10, 5, 2, 1]
        """

        def decorate(body: Callable[..., Any]) -> Any:
            return self._iterate(streams, name, sequenced, body)

        return decorate

    def _iterate(
        self, streams: Sequence[Stream], name: Optional[str], sequenced: bool, body: Callable[..., Any]
    ) -> Any:
        """:meth:`iterate`'s loop: ``body`` built in a new scope entered by ``streams``;
        the stream (or tuple of streams) leaving it."""
        outer = self._scope_of(streams, "iterate")
        nm = str(name or getattr(body, "__name__", "iterate"))
        if sequenced and outer.depth != 0:
            raise GraphError(f"iterate {nm!r}: a sequenced scope must be in the root scope (int epochs)")
        scope = Scope(self, PlanScope(nm, outer.depth + 1, outer.plan, sequenced), outer)
        entered = []
        for s in streams:
            enter = Enter(name=self._name(f"{nm}.enter", None), scope=scope.plan)
            entered.append(Stream(self, self._add(enter, [(s.node, s.port)]), 0, scope))
        result = body(scope, *entered)
        for fb in scope._feedbacks:
            if not fb.connected:
                raise GraphError(f"iterate {nm!r}: feedback {fb.name!r} was never connected")
        results = result if isinstance(result, tuple) else (result,)
        left = []
        for r in results:
            if not isinstance(r, Stream) or r.scope is not scope:
                raise GraphError(f"iterate {nm!r}: the body must return stream(s) of its scope, got {r!r}")
            leave = Leave(name=self._name(f"{nm}.leave", None), scope=outer.plan, inner=scope.plan)
            left.append(Stream(self, self._add(leave, [(r.node, r.port)]), 0, outer))
        return tuple(left) if isinstance(result, tuple) else left[0]


class Dataflow(FrontierOperators, KeyedOperators, IterateScopes):
    """A dataflow graph and the entry point of the decorator API (see module docs).

    ``name`` names the dataflow in errors and metrics.  What it builds is
    :attr:`graph`, a :class:`tstate.plan.Graph`; running it (``start``, ``run``,
    ``state``, ``read``, ``backend``, ``execution``, ``metrics``) is the base class
    :class:`~tstate.runner.Runs`, which hands it to a :class:`~tstate.runner.Runner`."""
