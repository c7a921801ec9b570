"""A MATCH_RECOGNIZE front end: Flink SQL's row pattern recognition, compiled into the
pattern API, with the rows Flink gives.

>>> from apps.cep.sql import match_recognize
>>> q = match_recognize('''
...     PARTITION BY symbol ORDER BY rowtime
...     MEASURES FIRST(A.price) AS start_price, LAST(A.price) AS top_price, B.price AS last_price
...     ONE ROW PER MATCH
...     PATTERN (A+ B)
...     DEFINE A AS LAST(A.price, 1) IS NULL OR A.price > LAST(A.price, 1),
...            B AS B.price < LAST(A.price)''')
>>> q.pattern
Pattern(A{1,inf} next B, skip_past_last_event)
>>> rows = [{"symbol": "XYZ", "rowtime": t, "price": p} for t, p in enumerate([10, 12, 13, 11])]
>>> q.run(rows)
[{'symbol': 'XYZ', 'start_price': 10, 'top_price': 13, 'last_price': 11}]

:func:`match_recognize` takes the clause's body (``PARTITION BY ... DEFINE ...``),
``MATCH_RECOGNIZE (...)``, or a whole ``SELECT ... FROM t MATCH_RECOGNIZE (...) [AS] x``
(the select list then picks and renames output columns), and returns a :class:`Query`:
its :class:`~apps.cep.pattern.Pattern` (``q.pattern``), the key and time of a row,
``q.row(match)`` (the output row of a match), ``q.run(rows)`` (a table in memory:
dicts, objects or a ``pyarrow.Table``) and ``q.cep(flow, stream)`` (the tstate
dataflow operator of :mod:`apps.cep.dataflow`, emitting the output rows).

Translation -- Flink's planner (``StreamExecMatch``) rule for rule:

* ``PATTERN (A B+ C)``: the first variable is ``Pattern.begin``, each next one
  ``.next()`` (strict contiguity); ``*`` ``one_or_more().optional().consecutive()``,
  ``+`` ``one_or_more().consecutive()``, ``?`` ``optional()``, ``{n}``
  ``times(n).consecutive()``, ``{n,}`` ``times_or_more(n).consecutive()``, ``{n,m}``
  ``times(n, m).consecutive()``, ``{,m}`` = ``{0,m}``; each quantifier is ``.greedy()``
  unless reluctant (``*?``, ``+?``, ``{n,m}?``), optional (``?``) or exact (``{n}``).
  Refused as Flink refuses them: a reluctant optional (``A??``), a greedy quantifier on
  the last variable (``(A B*)``: end with a plain or reluctant variable), a pattern
  that can match no row (``(A* B?)``), a variable used twice; alternation ``|``,
  groups ``(A B)+``, ``PERMUTE``, ``{- -}`` and anchors (the NFA has no branching).
* ``DEFINE``: a condition per variable (none: every row); the expression language
  and its Flink semantics are in :mod:`apps.cep.sql_expressions` (``PREV(x, n)`` with
  ``n >= 1`` is an extension: Flink refuses physical offsets).
* ``AFTER MATCH SKIP PAST LAST ROW`` (the default), ``TO NEXT ROW``,
  ``TO FIRST x`` / ``TO LAST x`` / ``TO x`` (with ``throw_exception_on_miss``: a match
  with no row for ``x``, or whose ``x`` row is its first, raises
  :class:`~apps.cep.errors.AfterMatchSkipError`, as Flink does).
* ``WITHIN INTERVAL '3' HOUR`` is ``.within(timedelta(hours=3))``; with numeric
  times, give the unit (``q.run(rows, time_unit=timedelta(minutes=1))``).
* ``PARTITION BY`` the key (none: one key); ``ORDER BY`` the time column first,
  ascending (more columns break ties in :meth:`Query.run`; the dataflow orders by
  time, ties in arrival order).  ``ONE ROW PER MATCH`` (the only mode Flink has): the
  partition columns, then the measures, in order.

Columns are the rows' declared fields, resolved when the query is compiled
(``match_recognize(query, fields=...)``) or bound to its rows (:meth:`Query.bind`:
``run`` binds to the table, ``cep`` to the source's record type): see
:mod:`apps.cep.sql_fields`.  Result types and casts are Flink's
(:mod:`apps.cep.sql_functions`, :mod:`apps.cep.sql_cast`).

Errors are :class:`~apps.cep.errors.SqlError`, naming the line and column in the query.
Parsing uses lark (a LALR grammar, ``sql_grammar.lark``): sqlglot parses
MATCH_RECOGNIZE but keeps PATTERN as raw text and has no WITHIN.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from attrs import frozen

from apps.cep.dataflow import CepStreams, cep
from apps.cep.errors import SqlError
from apps.cep.matcher import Match, Matcher
from apps.cep.pattern import AfterMatchSkip, Pattern
from apps.cep.sql_expressions import ExprCompiler, interval_of, name_of, sql_error
from apps.cep.sql_fields import Fields, RowFields, fields_of

__all__ = ["Measure", "Query", "SqlStreams", "match_recognize"]

_GRAMMAR = Path(__file__).with_name("sql_grammar.lark")
_PARSER: Any = None


def _parser() -> Any:
    global _PARSER
    if _PARSER is None:
        import lark

        _PARSER = lark.Lark(
            _GRAMMAR.read_text(), parser="lalr", lexer="contextual", propagate_positions=True,
            maybe_placeholders=True,
        )  # fmt: skip
    return _PARSER


def _parse(text: str) -> Any:
    import lark

    try:
        return _parser().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        raise _parse_error(text, exc) from None


def _readable(term: str) -> str:
    """A terminal's name as the user wrote it: ``','``, ``AS``, ``a name``."""
    p = _parser()
    try:
        pat = p.get_terminal(term).pattern
    except KeyError:
        return term
    if pat.type == "str":
        return repr(pat.value) if not pat.value.isalpha() else pat.value.upper()
    return {
        "NAME": "a name", "QUOTED_NAME": "a quoted name", "INT": "an integer", "DECIMAL": "a number",
        "STRING": "a string", "COMP_OP": "a comparison",
    }.get(term, term)  # fmt: skip


def _parse_error(text: str, exc: Any) -> SqlError:
    import lark

    line, column = getattr(exc, "line", 0) or 0, getattr(exc, "column", 0) or 0
    terms = getattr(exc, "accepts", None) or getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ()
    expected = sorted({_readable(t) for t in terms if t != "$END"})
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        tok = exc.token
        what = "end of the query" if tok.type == "$END" else repr(str(tok))
        if tok.type == "$END":
            lines = text.splitlines() or [""]
            line, column = len(lines), len(lines[-1]) + 1
    elif isinstance(exc, lark.exceptions.UnexpectedCharacters):
        pos = exc.pos_in_stream  # lark types it Optional; UnexpectedCharacters always sets it
        what = repr(text[pos]) if pos is not None and pos < len(text) else "end of the query"
    else:
        what = "end of the query"
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
    hint = f"; expected {', '.join(expected[:16])}{' ...' if len(expected) > 16 else ''}" if expected else ""
    return sql_error(text, line, column, f"syntax error: unexpected {what}{hint}")


@frozen
class Measure:
    """One output column of a match: its ``name``, ``fn(match) -> value`` and the
    expression's text."""

    name: str
    fn: Callable[[Match], Any]
    text: str


@frozen
class SqlStreams:
    """What :meth:`Query.cep` returns: ``rows`` (the output rows, dicts, at the
    dataflow time their match is emitted) and the underlying :class:`CepStreams`
    (``matches`` as ``(key, Match)``, ``timeouts``, ``late``, the operator)."""

    rows: Any
    cep: CepStreams


@frozen
class Readers:
    """How a compiled query reads a row's key, time and ORDER BY columns (getters of
    declared fields, resolved when the query was compiled)."""

    key: Callable[[Any], Any]
    time: Callable[[Any], Any]
    partition: tuple[Callable[[Any], Any], ...]
    order: tuple[Callable[[Any], Any], ...]


@frozen(eq=False)
class Query:
    """A compiled MATCH_RECOGNIZE query (see the module docstring)."""

    text: str
    pattern: Pattern
    partition_by: tuple[str, ...]
    #: ``(column, descending)``; the first is the time column, ascending
    order_by: tuple[tuple[str, bool], ...]
    measures: tuple[Measure, ...]
    #: the output columns, in order (after the SELECT list, if any)
    columns: tuple[str, ...]
    #: SELECT items as (output column of the clause, name in the result), or None for *
    select: Optional[tuple[tuple[str, str], ...]]
    within: Optional[dt.timedelta]
    #: the rows' fields the query was compiled against (:mod:`apps.cep.sql_fields`)
    fields: Fields
    exact_avg: bool
    read: Readers

    @property
    def variables(self) -> tuple[str, ...]:
        return self.pattern.names

    @property
    def time_column(self) -> str:
        return self.order_by[0][0]

    def bind(self, declared: Any) -> "Query":
        """The query compiled against the fields of rows declared as ``declared`` (a type,
        a pyarrow schema, column names: :func:`~apps.cep.sql_fields.fields_of`); itself
        when it was compiled against declared fields already, or ``declared`` declares
        none.  Raises :class:`SqlError` for a column the rows do not have."""
        if not isinstance(self.fields, RowFields):
            return self
        fields = fields_of(declared)
        if isinstance(fields, RowFields):
            return self
        return match_recognize(self.text, fields, exact_avg=self.exact_avg)

    def key(self, row: Any) -> Any:
        """The partition key of a row: the PARTITION BY column's value, a tuple of them
        for several, ``None`` without PARTITION BY."""
        return self.read.key(row)

    def time(self, row: Any) -> Any:
        """The time of a row (its ORDER BY column)."""
        return self.read.time(row)

    def row(self, match: Match) -> dict[str, Any]:
        """The output row of a match: the partition columns (of the match's first row)
        and the measures (ONE ROW PER MATCH), projected by the SELECT list."""
        first = match.events()[0]
        out = {c: get(first) for c, get in zip(self.partition_by, self.read.partition)}
        for m in self.measures:
            out[m.name] = m.fn(match)
        if self.select is None:
            return out
        return {new: out[old] for old, new in self.select}

    def matcher(self, time_unit: Optional[dt.timedelta] = None, **kwargs: Any) -> Matcher[Any]:
        """A :class:`Matcher` of the pattern (``time_unit`` for numeric times and WITHIN)."""
        return Matcher(self.pattern, time_unit=time_unit, **kwargs)

    def run(self, rows: Any, *, time_unit: Optional[dt.timedelta] = None) -> list[dict[str, Any]]:
        """Evaluate the query over a table in memory (a ``pyarrow.Table``, or an iterable
        of dicts or objects) as Flink does over a bounded table: per partition, rows in
        ORDER BY order (the input order breaks remaining ties), the time advanced to each
        row's before it is matched, and to the end of time after the last row (windows
        close; without WITHIN a match held back by a partial match that never ends is
        never emitted, as in Flink).  The query is first bound to the rows' fields (the
        table's columns, the first row's keys or class: :meth:`bind`), so a column they
        lack is an :class:`SqlError` before any row is matched.  Returns the output rows:
        partitions in the order of their first row, matches in emission order within each."""
        if hasattr(rows, "to_pylist"):
            q = self.bind(rows.schema)
            rows = rows.to_pylist()
        else:
            rows = list(rows)
            q = self.bind(_declared_by(rows))
        return q._run(rows, time_unit)

    def _run(self, rows: list[Any], time_unit: Optional[dt.timedelta]) -> list[dict[str, Any]]:
        m = self.matcher(time_unit)
        key = self.read.key
        groups: dict[Any, list[Any]] = {}
        for r in rows:
            groups.setdefault(key(r), []).append(r)
        time = self.read.time
        out: list[dict[str, Any]] = []
        for part in groups.values():
            for get, (_col, desc) in reversed(list(zip(self.read.order, self.order_by))):  # stable sorts, last first
                part.sort(key=get, reverse=desc)
            st = m.new_state()
            last: Any = None
            for r in part:
                t = time(r)
                ms, _ = m.advance_time(st, t)
                ms += m.process(st, r, t)
                out += [self.row(x) for x in ms]
                last = t
            if last is not None and m.window is not None:
                ms, _ = m.advance_time(st, _end_of_time(last))
                out += [self.row(x) for x in ms]
        return out

    def cep(self, flow: Any, stream: Any, **kwargs: Any) -> SqlStreams:
        """The query as a tstate operator over ``stream`` (records: dicts or objects with
        the query's columns): :func:`apps.cep.dataflow.cep` keyed by the PARTITION BY
        columns, in event time of the ORDER BY column (the epoch, unit and record type
        come from the source when it declares them; ``kwargs`` go to ``cep``: ``epoch``,
        ``lateness``, ``event_type``, ``time_unit``, ``name``, ...).  The query is bound
        to the records' fields (``event_type``, else the source's record type:
        :meth:`bind`) when the dataflow is built.  ``rows`` carries :meth:`row` of every
        match."""
        if len(self.order_by) > 1:
            raise SqlError(
                f"ORDER BY {', '.join(c for c, _ in self.order_by)}: the dataflow orders rows by time only "
                "(ties in arrival order); use one ORDER BY column there (Query.run takes several)"
            )
        q = self.bind(_declared_rows(stream, kwargs.get("event_type")))
        kwargs.setdefault("time", q.read.time)
        kwargs.setdefault("name", "match_recognize")
        streams = cep(flow, stream, q.pattern, key=q.read.key, **kwargs)
        to_row = q.row
        rows = streams.matches.map(lambda km: to_row(km[1]), name=f"{streams.operator.name}.rows")
        return SqlStreams(rows, streams)

    def __repr__(self) -> str:
        return f"Query({self.pattern!r}, partition_by={self.partition_by}, columns={self.columns})"


def _declared_rows(stream: Any, event_type: Any) -> Any:
    """What declares the records of ``stream``: ``event_type``, else its source's record
    type (or, for a table source whose columns have no record type, its Arrow schema)."""
    if event_type is not None:
        return event_type
    src = stream.origin_source() if hasattr(stream, "origin_source") else None
    if src is None:
        return None
    declared = src.record_type()
    if declared is None and hasattr(src, "arrow_schema"):
        declared = src.arrow_schema()
    return declared


def _declared_by(rows: list[Any]) -> Any:
    """What declares rows in memory: every key of dict rows (in first-seen order), the
    class of objects of one class, else nothing (checked per row)."""
    if not rows:
        return None
    if all(r.__class__ is dict for r in rows):
        keys = list(dict.fromkeys(k for r in rows for k in r))
        return keys if all(isinstance(k, str) for k in keys) else None
    cls = rows[0].__class__
    return cls if all(r.__class__ is cls for r in rows) else None


def _key_fn(getters: tuple[Callable[[Any], Any], ...]) -> Callable[[Any], Any]:
    if not getters:
        return lambda _r: None
    if len(getters) == 1:
        return getters[0]
    return lambda r: tuple(g(r) for g in getters)


def _end_of_time(t: Any) -> Any:
    if isinstance(t, dt.datetime):
        return dt.datetime.max.replace(tzinfo=t.tzinfo)
    return math.inf


# ---- compiling the parse tree ---------------------------------------------------------------


def match_recognize(query: str, fields: Any = None, *, exact_avg: bool = False) -> Query:
    """Parse and compile a MATCH_RECOGNIZE query (see the module docstring); raises
    :class:`~apps.cep.errors.SqlError` naming the position of what is wrong.

    ``fields``: what the rows declare (an attrs class, a dataclass, a named tuple, a
    ``TypedDict``, a pyarrow schema, column names: :func:`~apps.cep.sql_fields.fields_of`);
    every column the query names is resolved against it now, and one it lacks is an
    ``SqlError`` naming the column, the clause and the columns there are.  Without it
    the query is bound when it is used (:meth:`Query.run`, :meth:`Query.cep`:
    :meth:`Query.bind`).  ``exact_avg``: ``AVG`` of integers divides exactly instead of
    truncating as Flink does (:mod:`apps.cep.sql_functions`)."""
    if not isinstance(query, str):
        raise SqlError(f"match_recognize: the query must be a str, got {type(query).__name__}")
    tree = _parse(query)
    return _Compiler(query, fields_of(fields), exact_avg).query(tree)


def _child(tree: Any, data: str) -> Any:
    for c in tree.children:
        if getattr(c, "data", None) == data:
            return c
    return None


class _Compiler:
    def __init__(self, text: str, fields: Fields, exact_avg: bool) -> None:
        self.text = text
        self.fields = fields
        self.exact_avg = exact_avg

    def expressions(self, variables: tuple[str, ...], current: Optional[str], clause: str) -> ExprCompiler:
        return ExprCompiler(self.text, variables, current, clause, self.fields, self.exact_avg)

    def error(self, node: Any, message: str) -> SqlError:
        meta = getattr(node, "meta", None)
        if meta is not None and not getattr(meta, "empty", True):
            line, column = meta.line, meta.column
        else:
            line, column = getattr(node, "line", 0) or 0, getattr(node, "column", 0) or 0
        return sql_error(self.text, line, column, message)

    def query(self, tree: Any) -> Query:
        top = tree.children[0]
        select_node = None
        if top.data == "full_query":
            select_node, _table, call = top.children
            body = call.children[0]
        elif top.data == "mr_call":
            body = top.children[0]
        else:
            body = top
        partition, order, measures, rows_mode, after, pattern, within, subset, define = body.children
        if rows_mode is not None and rows_mode.data == "all_rows":
            raise self.error(rows_mode, "ALL ROWS PER MATCH is not supported (Flink has ONE ROW PER MATCH only)")
        if subset is not None:
            raise self.error(subset, "SUBSET is not supported (as in Flink)")
        variables, terms = self.pattern_terms(pattern)
        definitions = self.definitions(define, variables)
        skip = self.skip(after, variables)
        p: Optional[Pattern] = None
        for (var, node, quant), cond in zip(terms, (definitions.get(v) for v in variables)):
            p = Pattern.begin(var, skip=skip) if p is None else p.next(var)
            if cond is not None:
                p = p.where(cond)
            if quant is not None:
                p = self.quantify(p, var, node, quant)
        assert p is not None
        window = None
        if within is not None:
            window = interval_of(self.expressions(variables, None, "WITHIN"), within.children[0])
            if window <= dt.timedelta(0):
                raise self.error(within, f"WITHIN {window}: the interval must be positive")
            p = p.within(window)
        self.flink_checks(p, pattern, terms)
        part_nodes = list(partition.children) if partition is not None else []
        part = tuple(self.column_name(c, "PARTITION BY") for c in part_nodes)
        order_by, order_nodes = self.order(order, pattern)
        ms = self.measures(measures, variables)
        names = [*part, *(m.name for m in ms)]
        for i, n in enumerate(names):
            if n in names[:i]:
                raise self.error(measures or partition, f"the output column {n!r} appears twice")
        select = self.select(select_node, names)
        columns = tuple(names) if select is None else tuple(new for _, new in select)
        partition_getters = tuple(self.getter(n, c, "PARTITION BY") for n, c in zip(part_nodes, part))
        order_getters = tuple(self.getter(n, c, "ORDER BY") for n, (c, _) in zip(order_nodes, order_by))
        read = Readers(_key_fn(partition_getters), order_getters[0], partition_getters, order_getters)
        return Query(
            self.text, p.validate(), part, order_by, ms, columns, select, window, self.fields, self.exact_avg, read
        )

    def getter(self, node: Any, column: str, clause: str) -> Callable[[Any], Any]:
        """The getter of ``column`` (named at ``node`` in ``clause``), or an SqlError."""
        problem = self.fields.problem(column)
        if problem is not None:
            raise self.error(node, f"{clause}: {problem}")
        return self.fields.row_getter(column)  # (a row's key, time, partition columns: never None)

    # -- PATTERN -------------------------------------------------------------------------------
    def pattern_terms(self, pattern: Any) -> tuple[tuple[str, ...], list[tuple[str, Any, Any]]]:
        alt = pattern.children[0]
        if len(alt.children) > 1:
            raise self.error(
                alt.children[1], "alternation (|) is not supported: the CEP NFA has no branching patterns (nor has Flink's)"
            )
        terms = []
        seen: list[str] = []
        for term in alt.children[0].children:
            primary, quant = term.children
            kind = primary.data
            if kind != "pat_var":
                what = {
                    "pat_group": "groups of variables ((A B)+) are not supported (as in Flink)",
                    "pat_permute": "PERMUTE is not supported (as in Flink)",
                    "pat_exclude": "exclusion {- -} is not supported (as in Flink)",
                    "pat_anchor": "anchors ^ and $ are not supported (a stream has no end)",
                }[kind]
                raise self.error(primary, what)
            var = name_of(primary.children[0])
            if var in seen:
                raise self.error(primary, f"pattern variable {var!r} appears twice (Flink: pattern variables must be unique)")
            seen.append(var)
            terms.append((var, primary, quant))
        return tuple(seen), terms

    def quantify(self, p: Pattern, var: str, node: Any, quant: Any) -> Pattern:
        base, reluctant_tok = quant.children
        reluctant = reluctant_tok is not None
        kind = base.data
        ints = [int(c) if c is not None else None for c in base.children if getattr(c, "type", "INT") == "INT"]
        lo: int
        hi: int  # -1: unbounded
        if kind == "q_star":
            lo, hi = 0, -1
        elif kind == "q_plus":
            lo, hi = 1, -1
        elif kind == "q_optional":
            lo, hi = 0, 1
        elif kind == "q_exact":
            lo = hi = ints[0] or 0
            if lo <= 0:
                raise self.error(quant, f"{var}{{{lo}}}: an exact quantifier needs n > 0")
        elif kind == "q_range":
            lo, hi_ = ints[0] or 0, ints[1]
            hi = -1 if hi_ is None else hi_
            if hi != -1 and (hi <= 0 or lo > hi):
                raise self.error(quant, f"{var}{{{lo},{hi}}}: needs 0 <= n <= m and m > 0")
        else:  # q_upto
            lo, hi = 0, ints[0] or 0
            if hi <= 0:
                raise self.error(quant, f"{var}{{,{hi}}}: needs m > 0")
        optional = lo == 0 and hi == 1
        if reluctant and optional:
            raise self.error(quant, f"{var}: reluctant optional quantifiers ({var}?? or {var}{{0,1}}?) are not supported (as in Flink)")
        if lo == 0 and hi == -1:
            p = p.one_or_more().optional().consecutive()
        elif lo == 1 and hi == -1:
            p = p.one_or_more().consecutive()
        elif optional:
            p = p.optional()
        elif hi != -1:
            p = p.times(lo, hi).consecutive()
        else:
            p = p.times_or_more(lo).consecutive()
        if not reluctant and not optional and lo != hi:
            p = p.greedy()
        return p

    def flink_checks(self, p: Pattern, pattern: Any, terms: list[tuple[str, Any, Any]]) -> None:
        if all(st.optional for st in p.stages):
            raise self.error(
                pattern, "the pattern can match no row (every variable is optional); Flink requires a non-optional one"
            )
        last = p.stages[-1]
        if last.greedy:
            var, node, quant = terms[-1]
            raise self.error(
                quant,
                f"the last variable {var} has a greedy quantifier: Flink does not allow it; finish the pattern with "
                f"a plain variable or a reluctant quantifier ({var}{self.text[quant.meta.start_pos:quant.meta.end_pos]}?)",
            )

    # -- DEFINE / MEASURES -----------------------------------------------------------------------
    def definitions(self, define: Any, variables: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
        out: dict[str, Callable[..., Any]] = {}
        for d in define.children:
            name_node, expr = d.children
            var = name_of(name_node)
            if var not in variables:
                raise self.error(d, f"DEFINE {var}: {var!r} is not a variable of the pattern ({', '.join(variables)})")
            if var in out:
                raise self.error(d, f"DEFINE {var}: defined twice")
            out[var] = self.expressions(variables, var, f"DEFINE {var}").condition(expr)
        return out

    def measures(self, measures: Any, variables: tuple[str, ...]) -> tuple[Measure, ...]:
        if measures is None:
            return ()
        comp = self.expressions(variables, None, "MEASURES")
        out = []
        for m in measures.children:
            _mode, expr, alias = m.children
            if alias is not None:
                name = name_of(alias)
            elif getattr(expr, "data", None) in ("column", "var_column"):
                name = name_of(expr.children[-1])
            else:
                raise self.error(m, "a measure that is not a column needs a name: <expression> AS <name>")
            out.append(Measure(name, comp.measure(expr, name), comp.source(expr)))
        return tuple(out)

    # -- the other clauses ----------------------------------------------------------------------
    def skip(self, after: Any, variables: tuple[str, ...]) -> AfterMatchSkip:
        if after is None:
            return AfterMatchSkip.skip_past_last_event()
        target = after.children[0]
        kind = target.data
        if kind == "skip_past_last_row":
            return AfterMatchSkip.skip_past_last_event()
        if kind == "skip_to_next_row":
            return AfterMatchSkip.skip_to_next()
        var = name_of(target.children[0])
        if var not in variables:
            raise self.error(target, f"AFTER MATCH SKIP TO {var}: {var!r} is not a variable of the pattern ({', '.join(variables)})")
        s = AfterMatchSkip.skip_to_first(var) if kind == "skip_to_first" else AfterMatchSkip.skip_to_last(var)
        return s.throw_exception_on_miss()

    def column_name(self, node: Any, clause: str) -> str:
        if node.data == "var_column":
            raise self.error(node, f"{clause} takes column names, not variable.column")
        return name_of(node.children[0])

    def order(self, order: Any, pattern: Any) -> tuple[tuple[tuple[str, bool], ...], list[Any]]:
        if order is None:
            raise self.error(pattern, "ORDER BY <time column> is required (MATCH_RECOGNIZE orders the rows by time)")
        keys = []
        nodes = []
        for item in order.children:
            col, direction = item.children
            desc = direction is not None and str(direction).upper() == "DESC"
            keys.append((self.column_name(col, "ORDER BY"), desc))
            nodes.append(col)
        if keys[0][1]:
            raise self.error(order.children[0], "the first ORDER BY column is the time and must be ascending")
        return tuple(keys), nodes

    def select(self, node: Any, names: list[str]) -> Optional[tuple[tuple[str, str], ...]]:
        if node is None or node.data == "select_all":
            return None
        out = []
        for item in node.children:
            col, alias = item.children
            name = name_of(col.children[-1])
            if name not in names:
                raise self.error(item, f"SELECT {name}: no such output column (the query gives {', '.join(names)})")
            out.append((name, name_of(alias) if alias is not None else name))
        return tuple(out)

