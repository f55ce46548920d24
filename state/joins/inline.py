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

Once many, the rows a visit read and wrote as one are stored apart (`settle_apart`), in an entry
of their own beside the join key's pages (`state.joins.pages`), and the key's entry keeps their
count and time: a later visit that only adds rows writes the key's entry with the pickles added
since, not every row again. A visit that reads the rows reads that entry too, in the one call
that reads the micro-batch's pages (`PageReads`), and writes it back only if its bytes changed.

Under a state TTL a pickle all of whose rows expired is dropped unread: a key that gets a row
every few seconds, each visit's rows a pickle of their own, holds the last TTL's rows. The
expired rows of a pickle that also holds live ones stay until the rows are next read; the join
never sees them either way.

The count is exact once the rows are read. A row added unread under a unique key the rows
already hold (an append-only input repeating a key; a changelog retracts first) is counted
twice until they are next read: the metrics of held rows can show one more, never fewer.

A multiset (no unique key: Nexmark's bids) is stored the same way (`InlineMultiset`): a visit
that adds copies without reading appends a pickle of row -> copies added, and reading merges
each pickle's copies into the row's count before it, as Flink adds one to the count in its map
state, unless the count had expired by the time they were added (then they start it again).
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, MutableMapping, ValuesView
from typing import TYPE_CHECKING, Any

from state.store.encoding import dump, dump_key, load

if TYPE_CHECKING:
    from state.store.keyed_state import EntryStore

# Pickles a key's rows may be stored as before a visit that adds more writes them as one: one
# visit in sixteen pays to read and rewrite them all, and a read has few pickles to decode.
MAX_CHUNKS = 16
# Rows written as one from this many on are stored apart: an entry of a few dozen rows costs
# the state server about what a small one does, one of a hundred several times that.
APART_ROWS = 32
# The page number of a side's rows stored apart, among its join key's pages (numbered from 0)
APART = -1

_ABSENT = object()
_UNREAD = object()


# rows, the latest time one was written, their pickle (None: stored apart, `settle_apart`)
Chunk = tuple[int, int, bytes | None]


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
        self.store: EntryStore | None = None
        self.owner: tuple = ()  # the join key and side, once bound
        self._name: bytes | None = None
        # the entry of the rows stored apart: as read (None: no entry), and whether one is held
        self.apart: Any = _UNREAD
        self.held_apart = self._apart_first()
        self.written_apart = False  # this visit's rows, stored apart by `settle_apart`

    def bind(self, store: EntryStore, key: Any, side: int) -> None:
        """Where the rows stored apart are: the join key's pages, for one micro-batch."""
        self.store, self.owner, self._name = store, (key, side), None

    @property
    def name(self) -> bytes:
        """The name of the entry of the rows stored apart, made only when used: most visits
        of most keys never name it."""
        if self._name is None:
            self._name = dump_key((*self.owner, APART))
        return self._name

    def _apart_first(self) -> bool:
        """Whether the first stored pickle is the rows stored apart."""
        return bool(self.chunks) and self.chunks[0][2] is None

    @property
    def merges_when_added_to(self) -> bool:
        """Whether a visit that adds rows reads them all, to write them as one: once they are
        `MAX_CHUNKS` pickles."""
        return self.read is None and len(self.chunks) >= MAX_CHUNKS

    def _merge_if_many(self) -> None:
        """Read the rows, to write them as one, once a visit added to `MAX_CHUNKS` pickles."""
        if self.added and self.merges_when_added_to:
            self._rows()

    @property
    def apart_unread(self) -> bool:
        """Whether the rows stored apart are held and their entry not read yet."""
        return self.held_apart and self.apart is _UNREAD and self.read is None

    def loaded_from(self, _number: int, _name: bytes, blob: bytes | None) -> None:
        """The entry of the rows stored apart, as read (`PageReads`)."""
        self.apart = blob

    def _pickle(self, pickled: bytes | None) -> dict:
        """A stored pickle's rows; the rows stored apart read from their entry if not read
        yet (none if Spark's TTL dropped it: every row in it had expired)."""
        if pickled is None:
            if self.apart is _UNREAD:
                assert self.store is not None, "rows stored apart read before `bind`"
                found = self.store.recall([self.name])
                self.apart = found[self.name] if found else self.store.get(self.name)
            return {} if self.apart is None else load(self.apart)
        return load(pickled)

    @classmethod
    def of(cls, rows: dict) -> InlineRows:
        """Rows held as a dict (read in the layout before this one, or back from pages)."""
        inline = cls()
        inline.read = rows
        return inline

    def _merge(self, rows: dict, later: dict) -> None:
        """Put entries stored or added later over `rows` (a unique key's latest row wins)."""
        rows.update(later)

    def _rows(self) -> dict:
        """Every row, decoded (once a visit), with those added before."""
        if self.read is None:
            rows: dict = {}
            for _count, _latest, pickled in self.chunks:
                part = self._pickle(pickled)
                self._merge(rows, self.widen(part) if self.widen is not None else part)
            self.read = rows
            if self.cutoff is not None:
                self.prune(self.cutoff)
            self._merge(rows, self.added)
            self.added = {}
        return self.read

    def plain(self) -> list[Chunk]:
        """The rows as stored (`state.store.encoding`)."""
        self._merge_if_many()
        if self.read is None:
            return [*self.chunks, _chunk(self.added)] if self.added else self.chunks
        if self.written_apart:
            return [(len(self.read), _latest(self.read), None)]
        return [_chunk(self.read)] if self.read else []

    def settle_apart(self, kept: bool = True) -> None:
        """Once bound: store the rows this visit wrote as one apart if they are many
        (`APART_ROWS`) and `kept` inline, else remove the entry of rows stored apart that no
        longer are (read here, expired, or moved to pages); a write only if bytes change."""
        assert self.store is not None, "rows settled before `bind`"
        self._merge_if_many()
        if self.read is not None and kept and len(self.read) >= APART_ROWS:
            blob = dump(self.read)
            if blob != self.apart:
                self.store.write_many([(self.name, blob)], [])
            self.written_apart = True
            return
        if self.held_apart and not (self.read is None and self._apart_first()):
            self.store.write_many([], [self.name])
            self.held_apart = False

    def prune(self, cutoff: int) -> None:
        """Drop the expired entries (`[.., written]`, written at `cutoff` or before): of rows a
        visit read, each; of rows not read, the pickles all of whose rows expired, oldest first
        (a later pickle may hold a newer row of the same unique key)."""
        self.cutoff = cutoff
        rows = self.read
        if rows is None:
            dropped = 0
            while dropped < len(self.chunks) and self._expired(dropped, cutoff):
                dropped += 1
            del self.chunks[:dropped]
            return
        for identity in [i for i, entry in rows.items() if entry[2] <= cutoff]:
            del rows[identity]

    def _expired(self, number: int, cutoff: int) -> bool:
        """Whether pickle `number` can go unread: all its rows expired."""
        return self.chunks[number][1] <= cutoff

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


class InlineMultiset(InlineRows):
    """A multiset's inline rows (row -> `[copies, associations, written]`): copies added before
    any read kept apart (`add_unread`) and stored as a pickle of their own, merged into the
    counts before them when read. Every pickle but the first holds what one visit added, all
    written at its time."""

    def __init__(
        self,
        chunks: list[Chunk] | None = None,
        widen: Callable[[dict], dict] | None = None,
        ttl_ms: int = 0,
    ) -> None:
        super().__init__(chunks, widen)
        self.ttl_ms = ttl_ms

    @property
    def unread(self) -> bool:
        """Whether no visit read the rows yet (copies are then added without reading them)."""
        return self.read is None

    def add_unread(self, row: Any, associations: int, now: int) -> None:
        """A copy of `row` added without reading the rows: its count is merged when read."""
        entry = self.added.get(row)
        if entry is None:
            self.added[row] = [1, associations, now]
        else:
            entry[0] += 1
            entry[1], entry[2] = associations, now

    def _merge(self, rows: dict, later: dict) -> None:
        """Copies added later counted with the row's copies before, as `MultisetView.add` would
        have counted them then: unless those had expired by the time of the later write."""
        ttl = self.ttl_ms
        for row, entry in later.items():
            held = rows.get(row)
            if held is None or (ttl > 0 and held[2] <= entry[2] - ttl):
                rows[row] = entry
            else:
                held[0] += entry[0]
                held[1], held[2] = entry[1], entry[2]

    def _expired(self, number: int, cutoff: int) -> bool:
        """All its rows expired, and had by the time of every later pickle's write: a later
        copy of one of its rows started the count again, so none of its copies count."""
        latest = self.chunks[number][1]
        later = self.chunks[number + 1 :]
        return latest <= cutoff and all(latest <= chunk[1] - self.ttl_ms for chunk in later)


def _latest(rows: dict) -> int:
    return max(entry[2] for entry in rows.values())


def _chunk(rows: dict) -> Chunk:
    return len(rows), _latest(rows), dump(rows)


def inline_rows(plain: list[Chunk], widen: Callable[[dict], dict] | None) -> InlineRows:
    """A unique key view's inline rows as stored (`InlineRows.plain`)."""
    return InlineRows(list(plain), widen)
