"""The regular join on the frame: Flink's regular join per join key, one entry per key.

The join's semantics, per join key, are those of `state.joins.regular_join` over the views of
`state.joins.views`. Each join key's views are one `MapState` entry of its bucket
(`KeyedEntries`): a micro-batch reads the keys its rows name, once each, and writes back those
whose views changed. A regular join's state is bounded by nothing but its keys, so one entry per
key is what keeps a batch's cost to what it touches (see `docs/design.md`). A side with many
rows for one key keeps them in pages (`state.joins.pages`), a `MapState` of their own.

Retention (`STATE_TTL`, Flink's `table.exec.state.ttl`) is per row, as in Flink
(`state.store.retention`): each row of a view expires on its own, a micro-batch drops the
expired rows of the keys it touches, and Spark's TTL on the entries removes the keys no batch
touches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.changes import SIDES, Change, Row, RowKind
from state.joins.fanout import Fanout
from state.joins.inline import APART, InlineRows
from state.joins.mini_batch import folded
from state.joins.pages import PagedRows, PageReads, settle
from state.joins.specs import Clock, MultiJoinSpec, RegularJoinSpec
from state.joins.views import (
    MultisetView,
    UniqueKeyView,
    View,
    hashed_columns,
    views_from_plain,
    views_size,
    views_to_plain,
)
from state.spark.frame import Held, InputRows, KeyHeld
from state.spark.layouts import KeyedEntries, entry_state
from state.store.encoding import load
from state.store.keyed_state import KeyedBucket, held_by_expiry, never
from state.store.retention import InputRetentions


def unique_key_of(
    fields: tuple[str, ...], unique_key: tuple[str, ...]
) -> Callable[[Row], tuple] | None:
    """A row's unique key, by the input's fields; None for an input without one."""
    if not unique_key:
        return None
    positions = [fields.index(name) for name in unique_key]
    return lambda row: tuple(row[p] for p in positions)


class RegularJoinOperator:
    """`RegularJoin` or `SemiAntiJoin` per join key, over buckets of keys; `sides` name the
    inputs whose rows it keeps, a view each per key."""

    name = "join"
    sides: tuple[str, ...] = SIDES

    def __init__(self, spec: RegularJoinSpec | MultiJoinSpec) -> None:
        self.spec = spec
        self.join = spec.operator()
        self.retentions = InputRetentions(spec.retention_ms)
        self.fanout = Fanout(spec.hot_key_rows)
        inputs = spec.inputs if isinstance(spec, MultiJoinSpec) else (spec.left, spec.right)
        self.unique_keys = [unique_key_of(side.fields, side.unique_key) for side in inputs]
        self.widenings = [side.widening for side in inputs]

    @property
    def clock(self) -> Clock:
        return self.spec.clock

    @property
    def store_ttl_ms(self) -> int | None:
        return self.retentions.store_ttl_ms

    def store(self, handle: StatefulProcessorHandle) -> KeyedEntries:
        return KeyedEntries(
            handle,
            views_to_plain,
            self._views_from_plain,
            never,
            views_size,
            self.store_ttl_ms,
            pages=True,
        )

    def _views_from_plain(self, plain: tuple) -> tuple[View, ...]:
        return views_from_plain(plain, self.retentions.each, self.widenings)

    def held(self, bucket: KeyedBucket) -> dict[str, Held]:
        """Rows per side (distinct rows of a side without a unique key), by when Spark's TTL
        drops them: the counts kept in the bucket's own value."""
        ledger = bucket.keys.ledger
        return {side: held_by_expiry(ledger, i) for i, side in enumerate(self.sides)}

    variables = ("bucket", "keys", "pages")

    def inspect(
        self, variable: str, name: bytes | None, value: bytes, now: int
    ) -> Iterator[KeyHeld]:
        """A key's entry: each side's rows (a paged side's count alone; of an inline side, those
        its entry holds); a page: its rows; rows stored apart: their count and rows."""
        self.retentions.at(now)
        if variable == "keys" and name is not None:
            plain = entry_state(value, now)
            if plain is None:
                return
            key = load(name)
            for side, view in zip(self.sides, self._views_from_plain(plain), strict=True):
                rows_held = getattr(view, "rows", None)
                if isinstance(rows_held, PagedRows):
                    yield KeyHeld(side, key, len(view))
                    continue
                if isinstance(rows_held, InlineRows) and rows_held.apart_unread:
                    # the rows stored apart are reported with the pages
                    rows_held.loaded_from(APART, b"", None)
                rows = [row for row, _associations in view.records()]
                if rows:
                    yield KeyHeld(side, key, len(rows), rows=rows)
        elif variable == "pages" and name is not None:
            key, side, page = load(name)
            view = self.spec.new_views(self.retentions.each)[side]
            alive = self.retentions[side].alive
            stored = load(value)  # a page's items, or the dict of rows stored apart
            items = stored.items() if isinstance(stored, dict) else stored
            entries = [(identity, e) for identity, e in items if alive(e[2])]
            rows = (
                [e[0] for _identity, e in entries]
                if isinstance(view, UniqueKeyView)
                else [identity for identity, e in entries for _ in range(e[0])]
            )
            widen = self.widenings[side]
            # a page's rows are counted in its key's entry, rows stored apart are not
            count = len(rows) if page == APART else 0
            yield KeyHeld(
                self.sides[side], key, count, rows=list(map(widen, rows)) if widen else rows
            )

    def _views(self, bucket: KeyedBucket, key: Any) -> tuple[View, ...]:
        """A key's views, their pages (if any) read from this bucket's pages when used."""
        views = bucket.keys.get(key)
        if views is None:
            return self.spec.new_views(self.retentions.each)
        for side, view in enumerate(views):
            rows = getattr(view, "rows", None)
            if isinstance(rows, PagedRows | InlineRows):
                assert bucket.pages is not None
                rows.bind(bucket.pages, key, side)
        return views

    def fire_due(self, bucket: Any, now: int) -> list[Change]:
        """A regular join waits for no time."""
        return []

    def apply(self, bucket: KeyedBucket, rows: InputRows, now: int) -> list[Change]:
        self.retentions.at(now)
        changes: list[Change] = []
        touched: dict[Any, tuple[View, ...]] = {}
        bucket.keys.prefetch(rows.keys)
        todo = [(i, kind, self._row(rows, i)) for i, kind in self._changes(rows)]
        pages = PageReads()
        for i, kind, row in todo:
            key, side = rows.keys[i], rows.sides[i]
            views = touched.get(key)
            if views is None:
                views = touched[key] = bucket.keys[key] = self._views(bucket, key)
            for other, view in enumerate(views):
                if isinstance(view, UniqueKeyView | MultisetView):
                    if other == side:
                        view.want_pages(pages, row, kind not in RowKind.ACCUMULATE)
                    else:
                        view.want_pages(pages, None)
        pages.read()
        for i, kind, row in todo:
            emitted = self.join.process(rows.sides[i], kind, row, touched[rows.keys[i]])
            self.fanout.emitted(len(emitted))
            changes += emitted
        for key, views in touched.items():
            for side, view in enumerate(views):
                view.prune()
                if isinstance(view, UniqueKeyView | MultisetView):
                    assert bucket.pages is not None
                    hashed = hashed_columns(view, self.widenings[side])
                    view.rows = settle(view.rows, bucket.pages, key, side, hashed)
            sizes = [len(view) for view in views]
            if not any(sizes):
                del bucket.keys[key]  # an emptied key leaves no entry
            for side, size in enumerate(sizes):
                self.fanout.held(self.sides[side], key, size)
        return changes

    def _row(self, rows: InputRows, i: int) -> Row:
        """The input row at position `i` of a micro-batch's rows."""
        return rows.row(i)

    def _changes(self, rows: InputRows) -> list[tuple[int, str]]:
        """The positions of the rows to join, in arrival order, and their kinds: every row as
        it came, or, in a mini-batch join, each key's changes of each input folded first
        (`state.joins.mini_batch`)."""
        order = rows.order()
        if not self.spec.mini_batch:
            return [(i, rows.ops[i]) for i in order]
        by_input: dict[tuple[Any, int], list[tuple[int, str, Row]]] = {}
        for i in order:
            change = (i, rows.ops[i], self._row(rows, i))
            by_input.setdefault((rows.keys[i], rows.sides[i]), []).append(change)
        kept = [
            change
            for (_key, side), changes in by_input.items()
            for change in folded(changes, self.unique_keys[side])
        ]
        return sorted(kept, key=lambda change: rows.seqs[change[0]])


class MultiJoinOperator(RegularJoinOperator):
    """A chain of INNER and LEFT joins over one shared key as one operator
    (`state.joins.multi_join`): a view per input per key, no join's result kept. Its input
    comes as a join of two's does, so the frame needs nothing of its own: the `side` column
    says the input (0 ..), the last input's rows are the right side, each other input's columns
    are its place in the left side (the earlier inputs' columns, as the chain's last join
    takes them), the others NULL."""

    def __init__(self, spec: MultiJoinSpec, sides: tuple[str, ...]) -> None:
        super().__init__(spec)
        self.sides = sides
        widths = [len(side.fields) for side in spec.inputs]
        self.slices = [slice(sum(widths[:i]), sum(widths[: i + 1])) for i in range(len(widths))]

    def _row(self, rows: InputRows, i: int) -> Row:
        side = rows.sides[i]
        if side == len(self.sides) - 1:
            return rows.rights[i]
        return rows.lefts[i][self.slices[side]]
