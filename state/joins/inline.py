"""A unique key view's rows in its join key's own entry, written as visits add them: a visit
that only adds rows (a new order of a product) neither decodes nor encodes the rows before it.

Flink puts a row with a unique key to its map state without reading the others
(`JoinRecordStateViews.InputSideHasUniqueKey.addRecord`). Here a key's rows share one entry
(`state.spark.regular`), so a new order of a product holding a hundred would otherwise unpickle
and pickle all hundred, at every visit, to add one.

So the rows are stored as what earlier visits wrote: pickles (`chunks`) of unique key ->
entry, each later one over the earlier ones, each with its number of rows and the latest time
one of them was written. A visit that adds rows without reading any appends one pickle of what
it added; one that reads them (to match a change of the other side, retract one, change an
association count, or move them to pages) decodes every pickle and writes them back as one (a
visit changes a read row's association count in place, unseen: the key's entry is rewritten
only if its bytes then differ). Past `MAX_CHUNKS` pickles the rows are read and written as one.

Under a state TTL a pickle all of whose rows expired is dropped unread: a key that gets a row
every few seconds, each visit's rows a pickle of their own, holds the last TTL's rows. The
expired rows of a pickle that also holds live ones stay until the rows are next read; the join
never sees them either way.

The count is exact once the rows are read. A row added unread under a unique key the rows
already hold (an append-only input repeating a key; a changelog retracts first) is counted
twice until they are next read: the metrics of held rows can show one more, never fewer.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, MutableMapping, ValuesView
from typing import Any

from state.store.encoding import dump, load

# Pickles a key's rows may be stored as before a visit that adds more writes them as one: one
# visit in sixteen pays to read and rewrite them all, and a read has few pickles to decode.
MAX_CHUNKS = 16

_ABSENT = object()


Chunk = tuple[int, int, bytes]  # rows, the latest time one was written, their pickle


class InlineRows(MutableMapping):
    """A unique key view's inline rows (unique key -> `[row, associations, written]`): the
    stored `chunks` decoded on first read (`widen`: their rows in the input's columns now),
    rows added before any read kept apart (`added`)."""

    def __init__(
        self, chunks: list[Chunk] | None = None, widen: Callable[[dict], dict] | None = None
    ) -> None:
        self.chunks, self.widen = chunks or [], widen
        self.added: dict[Any, Any] = {}
        self.read: dict[Any, Any] | None = None if self.chunks else {}
        self.cutoff: int | None = None  # of the last `prune`

    @classmethod
    def of(cls, rows: dict) -> InlineRows:
        """Rows held as a dict (read in the layout before this one, or back from pages)."""
        inline = cls()
        inline.read = rows
        return inline

    def _rows(self) -> dict:
        """Every row, decoded (once a visit), with those added before."""
        if self.read is None:
            rows: dict = {}
            for _count, _latest, pickled in self.chunks:
                rows.update(load(pickled))
            if self.widen is not None:
                rows = self.widen(rows)
            self.read = rows
            if self.cutoff is not None:
                self.prune(self.cutoff)
            rows.update(self.added)
            self.added = {}
        return self.read

    def plain(self) -> list[Chunk]:
        """The rows as stored (`state.store.encoding`)."""
        if self.read is None and self.added and len(self.chunks) >= MAX_CHUNKS:
            self._rows()
        if self.read is None:
            return [*self.chunks, _chunk(self.added)] if self.added else self.chunks
        return [_chunk(self.read)] if self.read else []

    def prune(self, cutoff: int) -> None:
        """Drop the expired entries (`[.., written]`, written at `cutoff` or before): of rows a
        visit read, each; of rows not read, the pickles all of whose rows expired, oldest first
        (a later pickle may hold a newer row of the same unique key)."""
        self.cutoff = cutoff
        rows = self.read
        if rows is None:
            kept = 0
            while kept < len(self.chunks) and self.chunks[kept][1] <= cutoff:
                kept += 1
            del self.chunks[:kept]
            return
        for identity in [i for i, entry in rows.items() if entry[2] <= cutoff]:
            del rows[identity]

    def __setitem__(self, identity: Any, entry: Any) -> None:
        if self.read is None:
            self.added[identity] = entry
        else:
            self.read[identity] = entry

    def __delitem__(self, identity: Any) -> None:
        del self._rows()[identity]

    def pop(self, identity: Any, default: Any = _ABSENT) -> Any:
        if default is _ABSENT:
            return self._rows().pop(identity)
        return self._rows().pop(identity, default)

    def __getitem__(self, identity: Any) -> Any:
        return self._rows()[identity]

    def get(self, identity: Any, default: Any = None) -> Any:
        return self._rows().get(identity, default)

    def __contains__(self, identity: object) -> bool:
        return identity in self._rows()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows())

    def __len__(self) -> int:
        """The rows, known without reading them (see the module's note on the count)."""
        if self.read is not None:
            return len(self.read)
        return sum(count for count, _latest, _pickled in self.chunks) + len(self.added)

    def keys(self) -> KeysView:
        return self._rows().keys()

    def items(self) -> ItemsView:
        return self._rows().items()

    def values(self) -> ValuesView:
        return self._rows().values()


def _chunk(rows: dict) -> Chunk:
    return len(rows), max(entry[2] for entry in rows.values()), dump(rows)


def inline_rows(plain: list[Chunk], widen: Callable[[dict], dict] | None) -> InlineRows:
    """A unique key view's inline rows as stored (`InlineRows.plain`)."""
    return InlineRows(list(plain), widen)
