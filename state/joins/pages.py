"""A join key's rows over pages of their own once they are many: a change rewrites one page.

A regular join keeps both sides' rows of a join key in the key's one state entry
(`state.spark.regular`): one read and one write per key and micro-batch. A key with a hundred
thousand orders would rewrite all of them whenever one changes, and its checkpoint would carry
them all.
Past `INLINE_ROWS` rows a side's rows move to pages, entries of their own named by the join key,
the side and the page number, each holding the rows whose identity (unique key, or the row) hashes
to it; the key's entry keeps the number of pages and of rows. A change reads and rewrites its own
page. A micro-batch reads the pages its changes fall in and every page of the sides they match
(Flink iterates its MapState), of all its keys, in one state call (`PageReads`), and writes the
changed pages back in one. Pages double when they average twice `PAGE_ROWS`, and the rows go
back inline when few are left.

Smaller pages (a key's rows in pages from a few dozen on) cost the workers less per change and
the JVM more per micro-batch, an entry more written per change: on two cores that was a loss
(`docs/performance.md`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, ItemsView, Iterator, MutableMapping, ValuesView
from typing import Any

from state.joins.inline import APART, InlineRows
from state.store.encoding import dump, dump_key, load
from state.store.keyed_state import EntryStore

INLINE_ROWS = 512  # a side's rows kept in the key's own entry
PAGE_ROWS = 256  # rows a page is sized for


def page_of(identity: Any, pages: int) -> int:
    """The page of a row's identity: a hash that is the same in every process (`hash()` of a
    string is not)."""
    return zlib.crc32(repr(identity).encode()) % pages


class PagedRows(MutableMapping):
    """A view's rows (identity -> entry) over `pages` entries of a store, read when first used.

    `version` grows whenever a page is written, so the key's entry, which holds it, is written
    too: under a state TTL the key then never expires before its pages. A page can expire before
    its key (a key whose other side changed): its rows had all expired by then.
    """

    def __init__(
        self,
        pages: int,
        count: int,
        version: int = 0,
        hashed: int | None = None,
        widen: Callable[[dict], dict] | None = None,
    ) -> None:
        """`hashed`: the leading columns of a row identity its page is chosen by (None: the
        whole identity), those the rows had when their input's columns grew; `widen`: a page's
        rows as read, in the input's columns now (`state.columns.Widening`)."""
        self.pages, self.count, self.version = pages, count, version
        self.hashed, self.widen = hashed, widen
        self.store: EntryStore | None = None
        self.prefix: tuple = ()
        self.loaded: dict[int, tuple[bytes, bytes | None, dict]] = {}  # page -> name, read, rows

    def bind(self, store: EntryStore, key: Any, side: int) -> None:
        """Where the pages are: a bucket's page store, for one micro-batch."""
        self.store, self.prefix = store, (key, side)
        self.loaded.clear()

    def _page(self, number: int) -> dict:
        if number not in self.loaded:
            reads = PageReads()
            reads.want(self, number)
            reads.read()
        return self.loaded[number][2]

    def loaded_from(self, number: int, name: bytes, blob: bytes | None) -> None:
        """Page `number` as read (None: no entry)."""
        rows = {} if blob is None else dict(load(blob))
        self.loaded[number] = (name, blob, self.widen(rows) if self.widen else rows)

    def name(self, number: int) -> bytes:
        return dump_key((*self.prefix, number))

    def read_all(self) -> None:
        """Every page not read yet, in one call."""
        reads = PageReads()
        reads.want_all(self)
        reads.read()

    def number_of(self, identity: Any) -> int:
        """The page an identity's row is on."""
        hashed = identity if self.hashed is None else identity[: self.hashed]
        return page_of(hashed, self.pages)

    def _page_of(self, identity: Any) -> dict:
        return self._page(self.number_of(identity))

    def __getitem__(self, identity: Any) -> Any:
        return self._page_of(identity)[identity]

    def __setitem__(self, identity: Any, entry: Any) -> None:
        page = self._page_of(identity)
        self.count += identity not in page
        page[identity] = entry

    def __delitem__(self, identity: Any) -> None:
        del self._page_of(identity)[identity]
        self.count -= 1

    def __iter__(self) -> Iterator[Any]:
        for page in self.pages_read():
            yield from page

    def __len__(self) -> int:
        return self.count

    def items(self) -> ItemsView:
        return _PageItems(self)

    def values(self) -> ValuesView:
        return _PageValues(self)

    def pages_read(self) -> Iterator[dict]:
        """Every page's rows, all read in one call: what iterating the rows takes, without
        finding each identity's page again."""
        self.read_all()
        for number in range(self.pages):
            yield self.loaded[number][2]

    def prune(self, cutoff: int) -> None:
        """Drop the expired entries (`[.., written]`, written at `cutoff` or before) of the
        pages read so far. Once every page has been read, the count is theirs: a page that
        Spark's TTL removed (every row in it had expired) is no longer counted."""
        for _name, _blob, rows in self.loaded.values():
            for identity in [i for i, entry in rows.items() if entry[2] <= cutoff]:
                del rows[identity]
                self.count -= 1
        if len(self.loaded) == self.pages:
            self.count = sum(len(rows) for _name, _blob, rows in self.loaded.values())

    def flush(self) -> None:
        """Write back the pages whose rows changed and remove the emptied ones, in one call."""
        assert self.store is not None
        puts: list[tuple[bytes, bytes]] = []
        removes: list[bytes] = []
        for name, before, rows in self.loaded.values():
            if not rows:
                if before is not None:
                    removes.append(name)
                continue
            blob = dump(list(rows.items()))
            if blob != before:
                puts.append((name, blob))
        if puts or removes:
            self.store.write_many(puts, removes)
            self.version += 1
        self.loaded.clear()

    def drop(self) -> dict:
        """All rows, in a dict, their pages removed."""
        self.read_all()
        rows: dict = {}
        for _name, _blob, page in self.loaded.values():
            rows.update(page)
            page.clear()
        self.flush()
        return rows


class PageReads:
    """The pages a micro-batch is about to use, of any keys' rows in one bucket's pages, read
    in one call: those the warm copies hold (`state.store.warm`) from them, the rest in one
    `get_many`."""

    def __init__(self) -> None:
        self.wanted: dict[bytes, tuple[PagedRows | InlineRows, int]] = {}
        self.whole: set[int] = set()  # the rows all of whose pages are wanted, by `id`

    def want(self, rows: PagedRows, number: int) -> None:
        if number not in rows.loaded:
            self.wanted[rows.name(number)] = (rows, number)

    def want_apart(self, rows: InlineRows) -> None:
        """The entry of a side's rows stored apart (`InlineRows.settle_apart`), if not read."""
        if rows.apart_unread:
            self.wanted[rows.name] = (rows, APART)

    def want_all(self, rows: PagedRows) -> None:
        if id(rows) not in self.whole:
            self.whole.add(id(rows))
            for number in range(rows.pages):
                self.want(rows, number)

    def read(self) -> None:
        if not self.wanted:
            return
        store = next(iter(self.wanted.values()))[0].store
        assert store is not None, "pages read before `bind`"
        found = store.recall(list(self.wanted))
        missing = [name for name in self.wanted if name not in found]
        if missing:
            found.update(zip(missing, store.get_many(missing), strict=True))
        for name, blob in found.items():
            rows, number = self.wanted[name]
            rows.loaded_from(number, name, blob)
        self.wanted.clear()


class _PageItems(ItemsView):
    _mapping: PagedRows

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for page in self._mapping.pages_read():
            yield from page.items()


class _PageValues(ValuesView):
    _mapping: PagedRows

    def __iter__(self) -> Iterator[Any]:
        for page in self._mapping.pages_read():
            yield from page.values()


def pages_for(count: int) -> int:
    return max(2, -(-count // PAGE_ROWS))


def settle(
    rows: dict | PagedRows | InlineRows,
    store: EntryStore,
    key: Any,
    side: int,
    hashed: int | None = None,
) -> dict | PagedRows | InlineRows:
    """A side's rows as they are to be stored after a micro-batch, their changed pages written:
    inline while few, else in pages (placed by the first `hashed` columns of their identities,
    `PagedRows`), resized when they hold over twice `PAGE_ROWS` rows on average or under half."""
    count = len(rows)
    if isinstance(rows, InlineRows):
        rows.bind(store, key, side)
    if isinstance(rows, PagedRows):
        if count > INLINE_ROWS // 2 and rows.pages // 2 <= pages_for(count) <= 2 * rows.pages:
            rows.flush()
            return rows
        version, rows = rows.version + 1, rows.drop()
        if count <= INLINE_ROWS // 2:
            return rows
    # rows stored as visits added them count a row added unread in two visits twice
    # (`state.joins.inline`): read, before they go to pages, their count is exact
    elif count <= INLINE_ROWS or len(rows.keys()) <= INLINE_ROWS:
        if isinstance(rows, InlineRows):
            rows.settle_apart()
        return rows
    else:
        version = 0
        if isinstance(rows, InlineRows):
            rows.settle_apart(kept=False)
    pages = pages_for(len(rows))
    paged = PagedRows(pages, 0, version, hashed)
    paged.bind(store, key, side)
    # no page of the key's side is stored: its rows were inline, or their pages just removed
    # (which a warm copy, current as of the visit's start, would not know)
    for number in range(pages):
        paged.loaded_from(number, paged.name(number), None)
    paged.update(rows)
    paged.flush()
    return paged
