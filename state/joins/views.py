"""The records one input side keeps for one join key, in the layout Flink chooses for it.

Flink's `JoinInputSideSpec` picks the layout from the input's unique key:

- the join key contains the unique key: at most one row per join key (`SingleRowView`);
- the input has a unique key: a map from unique key to row (`UniqueKeyView`);
- no unique key: a multiset, row -> number of copies (`MultisetView`).

Every record also carries its association count, the number of rows of the other side it
currently joins with. Only outer sides use it (a null-padded result exists exactly while it is
0), as Flink's `OuterJoinRecordStateView`. A view is loaded and stored whole, once per key and
micro-batch: each state call is a socket round trip to the JVM, so per-row access would cost
far more than the join itself.

Every record also carries the processing time of its last write (adding it, retracting a copy,
changing its association count), and a view hides it once its retention has passed
(`state.store.retention`), as Flink's state does with `table.exec.state.ttl`: the join never sees an
expired row, and `prune` drops them from what is stored. Copies of a row without a unique key
share one time, as they share one entry of Flink's map state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from state.changes import Row
from state.columns import Widening
from state.joins.inline import InlineMultiset, InlineRows, inline_rows
from state.joins.pages import PagedRows, PageReads
from state.store.retention import FOREVER, Retention


class SingleRowView:
    """The join key contains the unique key: the newest row replaces any other."""

    def __init__(self, retention: Retention = FOREVER) -> None:
        self.retention = retention
        self.row: Row | None = None
        self.associations = 0
        self.written = 0

    def add(self, row: Row, associations: int = 0) -> None:
        self.row, self.associations, self.written = row, associations, self.retention.now

    def retract(self, row: Row) -> None:
        self.row, self.associations = None, 0

    def records(self) -> Iterator[tuple[Row, int]]:
        if self.row is not None and self.retention.alive(self.written):
            yield self.row, self.associations

    def set_associations(self, row: Row, associations: int) -> None:
        self.associations, self.written = associations, self.retention.now

    def holds(self, row: Row) -> bool:
        """Whether a retraction of `row` has a row to retract: the key's one row."""
        return self.row is not None and self.retention.alive(self.written)

    def prune(self) -> None:
        if self.row is not None and not self.retention.alive(self.written):
            self.retract(self.row)

    def __len__(self) -> int:
        return 0 if self.row is None else 1


class _EntriesView:
    """A view of many rows: entries by a key of the row, each `[.., associations, written]`,
    in pages once many (`state.joins.pages`)."""

    rows: dict[Row, list[Any]] | PagedRows | InlineRows
    retention: Retention

    def _key(self, row: Row) -> Row:
        return row

    def set_associations(self, row: Row, associations: int) -> None:
        """Of a live row (an expired one a visit has not dropped yet stays expired)."""
        entry = self.rows.get(self._key(row))
        if entry is not None and self.retention.alive(entry[2]):
            entry[1], entry[2] = associations, self.retention.now

    def holds(self, row: Row) -> bool:
        """Whether a retraction of `row` has a row to retract (by its unique key, or itself)."""
        entry = self.rows.get(self._key(row))
        return entry is not None and self.retention.alive(entry[2])

    def prune(self) -> None:
        _prune(self.rows, self.retention)

    def want_pages(self, reads: PageReads, row: Row | None, retracts: bool = False) -> None:
        """Ask `reads` for the pages a change will use, if the rows are paged: the page of
        `row`, a change of this side (`retracts`: a retraction); every page (None) for a change
        the rows are matched with. Inline rows stored apart are read for a change that reads
        them: one they are matched with, a retraction, an addition that writes them as one
        (`InlineRows.merges_when_added_to`), so that a visit reads them in the one call that
        reads its micro-batch's pages, not in a call of their own."""
        if isinstance(self.rows, PagedRows):
            if row is None:
                reads.want_all(self.rows)
            else:
                reads.want(self.rows, self.rows.number_of(self._key(row)))
        elif isinstance(self.rows, InlineRows) and (
            row is None or retracts or self.rows.merges_when_added_to
        ):
            reads.want_apart(self.rows)

    def __len__(self) -> int:
        """Entries: known without reading a paged view's pages."""
        return len(self.rows)


class UniqueKeyView(_EntriesView):
    """The input has a unique key that the join key does not contain: unique key -> row."""

    def __init__(self, key_indices: Sequence[int], retention: Retention = FOREVER) -> None:
        self.key_indices = tuple(key_indices)
        self.retention = retention
        self.rows = InlineRows()  # unique key -> [row, associations, written]

    def _key(self, row: Row) -> Row:
        return tuple(row[i] for i in self.key_indices)

    def add(self, row: Row, associations: int = 0) -> None:
        self.rows[self._key(row)] = [row, associations, self.retention.now]

    def retract(self, row: Row) -> None:
        self.rows.pop(self._key(row), None)

    def records(self) -> Iterator[tuple[Row, int]]:
        cutoff = self.retention.cutoff
        yield from [(row, n) for row, n, written in self.rows.values() if written > cutoff]


class MultisetView(_EntriesView):
    """No unique key: each distinct row with its number of copies; copies share one count
    (so its length is of distinct rows)."""

    def __init__(self, retention: Retention = FOREVER) -> None:
        self.retention = retention
        self.rows = InlineMultiset()  # row -> [copies, associations, written]

    def _live(self, row: Row) -> list[int] | None:
        """The row's entry, unless it expired (then it is dropped, as Flink never reads it)."""
        entry = self.rows.get(row)
        if entry is not None and not self.retention.alive(entry[2]):
            del self.rows[row]
            return None
        return entry

    def add(self, row: Row, associations: int = 0) -> None:
        if isinstance(self.rows, InlineMultiset) and self.rows.unread:
            self.rows.add_unread(row, associations, self.retention.now)
            return
        entry = self._live(row)
        if entry is None:
            self.rows[row] = [1, associations, self.retention.now]
        else:
            entry[0] += 1
            entry[1], entry[2] = associations, self.retention.now

    def retract(self, row: Row) -> None:
        entry = self._live(row)
        if entry is not None:
            entry[0] -= 1
            entry[2] = self.retention.now
            if entry[0] <= 0:
                del self.rows[row]

    def records(self) -> Iterator[tuple[Row, int]]:
        """Every copy of every live row, as Flink's view yields them."""
        cutoff = self.retention.cutoff
        for row, (copies, associations, written) in list(self.rows.items()):
            if written > cutoff:
                for _ in range(copies):
                    yield row, associations


View = SingleRowView | UniqueKeyView | MultisetView


def _prune(rows: dict | PagedRows | InlineRows, retention: Retention) -> None:
    """Drop the expired entries (`[..., written]`) of a side's rows: all of them in a dict,
    those a micro-batch read of rows paged or stored as added (the others wait for a batch that
    reads them, or for Spark's TTL on their entry)."""
    if retention.ttl_ms <= 0:
        return
    cutoff = retention.cutoff
    if not isinstance(rows, dict):
        rows.prune(cutoff)
        return
    for identity in [i for i, entry in rows.items() if entry[2] <= cutoff]:
        del rows[identity]


def new_view(
    join_key: Sequence[str],
    fields: Sequence[str],
    unique_key: Sequence[str],
    retention: Retention = FOREVER,
) -> View:
    """The layout Flink would choose for an input with these columns and unique key."""
    if unique_key and set(unique_key) <= set(join_key):
        return SingleRowView(retention)
    if unique_key:
        return UniqueKeyView([list(fields).index(c) for c in unique_key], retention)
    return MultisetView(retention)


def _rows_plain(rows: dict | PagedRows | InlineRows) -> list | tuple:
    """A view's rows: inline as the pickles visits added (`InlineRows`), paged as what the
    key's entry keeps of them."""
    if isinstance(rows, PagedRows):
        return rows.pages, rows.count, rows.version
    return (rows if isinstance(rows, InlineRows) else InlineRows.of(rows)).plain()


def _rows(
    plain: dict | tuple, widen: Callable[[dict], dict] | None, hashed: int | None
) -> dict | PagedRows:
    """A side's rows from plain data, read in its columns now (`widen`, None: as they are),
    placed in pages by their identities' first `hashed` columns (None: all)."""
    if isinstance(plain, dict):
        return widen(plain) if widen else plain
    return PagedRows(*plain, hashed=hashed, widen=widen)


def _widen_entries(widening: Widening) -> Callable[[dict], dict]:
    """A unique key view's entries (`[row, ..]`), their rows widened in place."""

    def widen(rows: dict) -> dict:
        for entry in rows.values():
            entry[0] = widening(entry[0])
        return rows

    return widen


def _widen_identities(widening: Widening) -> Callable[[dict], dict]:
    """A multiset's rows, which are their own identities, widened."""
    return lambda rows: {widening(row): entry for row, entry in rows.items()}


def hashed_columns(view: View, widening: Widening | None) -> int | None:
    """What a view's pages are chosen by (`PagedRows`): a multiset's rows, its identities, by
    the columns its oldest rows hold once its input's columns grew; else the whole identity."""
    return widening.held if widening and isinstance(view, MultisetView) else None


def _plain(view: View) -> tuple:
    """A view as plain data (`state.store.encoding`)."""
    if isinstance(view, SingleRowView):
        return "single", view.row, view.associations, view.written
    if isinstance(view, UniqueKeyView):
        return "unique", view.key_indices, _rows_plain(view.rows)
    return "multiset", _rows_plain(view.rows)


def _view(plain: tuple, retention: Retention, widening: Widening | None) -> View:
    view: View
    if plain[0] == "single":
        view = SingleRowView(retention)
        view.row, view.associations, view.written = plain[1:]
        if widening and view.row is not None:
            view.row = widening(view.row)
    elif plain[0] == "unique":
        view = UniqueKeyView(plain[1], retention)
        widen = _widen_entries(widening) if widening else None
        if isinstance(plain[2], list):
            view.rows = inline_rows(plain[2], widen)
        else:  # paged, or inline as one dict (the layout before `InlineRows`)
            rows = _rows(plain[2], widen, None)
            view.rows = InlineRows.of(rows) if isinstance(rows, dict) else rows
    else:
        view = MultisetView(retention)
        widen = _widen_identities(widening) if widening else None
        if isinstance(plain[1], list):
            view.rows = InlineMultiset(list(plain[1]), widen, retention.ttl_ms)
        else:  # paged, or inline as one dict (the layout before `InlineMultiset`)
            rows = _rows(plain[1], widen, widening.held if widening else None)
            view.rows = InlineMultiset.of(rows) if isinstance(rows, dict) else rows
    return view


def views_to_plain(views: tuple[View, ...]) -> tuple:
    """Each input's view of a key (two for a join of two) as plain data
    (`state.store.encoding`)."""
    return tuple(_plain(view) for view in views)


def views_size(views: tuple[View, ...]) -> tuple[int, ...]:
    return tuple(len(view) for view in views)


def views_from_plain(
    plain: tuple,
    retentions: Sequence[Retention] = (),
    widenings: Sequence[Widening | None] = (),
) -> tuple[View, ...]:
    """A key's views from plain data, each under its input's retention (none: for ever), its
    rows widened to its input's columns now (`state.columns.Widening`; none: as stored)."""
    return tuple(
        _view(
            view,
            retentions[side] if retentions else FOREVER,
            widenings[side] if widenings else None,
        )
        for side, view in enumerate(plain)
    )
