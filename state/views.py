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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from state.pages import PagedRows

Row = tuple[Any, ...]


class SingleRowView:
    """The join key contains the unique key: the newest row replaces any other."""

    def __init__(self) -> None:
        self.row: Row | None = None
        self.associations = 0

    def add(self, row: Row, associations: int = 0) -> None:
        self.row, self.associations = row, associations

    def retract(self, row: Row) -> None:
        self.row, self.associations = None, 0

    def records(self) -> Iterator[tuple[Row, int]]:
        if self.row is not None:
            yield self.row, self.associations

    def set_associations(self, row: Row, associations: int) -> None:
        self.associations = associations

    def __len__(self) -> int:
        return 0 if self.row is None else 1


class UniqueKeyView:
    """The input has a unique key that the join key does not contain: unique key -> row."""

    def __init__(self, key_indices: Sequence[int]) -> None:
        self.key_indices = tuple(key_indices)
        # unique key -> [row, associations], in pages once many (`state.pages`)
        self.rows: dict[Row, list[Any]] | PagedRows = {}

    def _key(self, row: Row) -> Row:
        return tuple(row[i] for i in self.key_indices)

    def add(self, row: Row, associations: int = 0) -> None:
        self.rows[self._key(row)] = [row, associations]

    def retract(self, row: Row) -> None:
        self.rows.pop(self._key(row), None)

    def records(self) -> Iterator[tuple[Row, int]]:
        yield from [(row, associations) for row, associations in self.rows.values()]

    def set_associations(self, row: Row, associations: int) -> None:
        entry = self.rows.get(self._key(row))
        if entry is not None:
            entry[1] = associations

    def __len__(self) -> int:
        return len(self.rows)


class MultisetView:
    """No unique key: each distinct row with its number of copies; copies share one count."""

    def __init__(self) -> None:
        # row -> [copies, associations], in pages once many (`state.pages`)
        self.rows: dict[Row, list[int]] | PagedRows = {}

    def add(self, row: Row, associations: int = 0) -> None:
        entry = self.rows.get(row)
        if entry is None:
            self.rows[row] = [1, associations]
        else:
            entry[0] += 1
            entry[1] = associations

    def retract(self, row: Row) -> None:
        entry = self.rows.get(row)
        if entry is not None:
            entry[0] -= 1
            if entry[0] <= 0:
                del self.rows[row]

    def records(self) -> Iterator[tuple[Row, int]]:
        """Every copy of every row, as Flink's view yields them."""
        for row, (copies, associations) in list(self.rows.items()):
            for _ in range(copies):
                yield row, associations

    def set_associations(self, row: Row, associations: int) -> None:
        entry = self.rows.get(row)
        if entry is not None:
            entry[1] = associations

    def __len__(self) -> int:
        """Distinct rows (each with its copies): known without reading a paged view's pages."""
        return len(self.rows)


View = SingleRowView | UniqueKeyView | MultisetView


def new_view(join_key: Sequence[str], fields: Sequence[str], unique_key: Sequence[str]) -> View:
    """The layout Flink would choose for an input with these columns and unique key."""
    if unique_key and set(unique_key) <= set(join_key):
        return SingleRowView()
    if unique_key:
        return UniqueKeyView([list(fields).index(c) for c in unique_key])
    return MultisetView()


def _rows_plain(rows: dict | PagedRows) -> dict | tuple:
    """Inline rows as they are; paged ones as what the key's entry keeps of them."""
    return rows if isinstance(rows, dict) else (rows.pages, rows.count, rows.version)


def _rows(plain: dict | tuple) -> dict | PagedRows:
    return plain if isinstance(plain, dict) else PagedRows(*plain)


def _plain(view: View) -> tuple:
    """A view as plain data (`state.encoding`)."""
    if isinstance(view, SingleRowView):
        return "single", view.row, view.associations
    if isinstance(view, UniqueKeyView):
        return "unique", view.key_indices, _rows_plain(view.rows)
    return "multiset", _rows_plain(view.rows)


def _view(plain: tuple) -> View:
    view: View
    if plain[0] == "single":
        view = SingleRowView()
        view.row, view.associations = plain[1], plain[2]
    elif plain[0] == "unique":
        view = UniqueKeyView(plain[1])
        view.rows = _rows(plain[2])
    else:
        view = MultisetView()
        view.rows = _rows(plain[1])
    return view


def views_to_plain(views: tuple[View, View]) -> tuple:
    """Both sides' views of a key as plain data (`state.encoding`)."""
    return _plain(views[0]), _plain(views[1])


def views_size(views: tuple[View, View]) -> tuple[int, int]:
    return len(views[0]), len(views[1])


def views_from_plain(plain: tuple) -> tuple[View, View]:
    return _view(plain[0]), _view(plain[1])
