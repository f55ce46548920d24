"""A join key's rows over pages of their own once they are many: a change rewrites one page.

A regular join keeps both sides' rows of a join key in the key's one state entry
(`state.spark.regular`): one read and one write per key and micro-batch. A key with a hundred
thousand orders would rewrite all of them whenever one changes, and its checkpoint would carry
them all.
Past `INLINE_ROWS` rows a side's rows move to pages, entries of their own named by the join key,
the side and the page number, each holding the rows whose identity (unique key, or the row) hashes
to it; the key's entry keeps the number of pages and of rows. A change reads and rewrites its own
page; matching the other side reads every page of it in one state call (Flink iterates its
MapState), and the changed pages are written back in one. Pages double when they average twice
`PAGE_ROWS`, and the rows go back inline when few are left.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, ItemsView, Iterator, MutableMapping, ValuesView
from typing import Any

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
            assert self.store is not None, "pages read before `bind`"
            name = dump_key((*self.prefix, number))
            self._loaded(number, name, self.store.get(name))
        return self.loaded[number][2]

    def _loaded(self, number: int, name: bytes, blob: bytes | None) -> None:
        rows = {} if blob is None else dict(load(blob))
        self.loaded[number] = (name, blob, self.widen(rows) if self.widen else rows)

    def read_all(self) -> None:
        """Every page not read yet, in one call."""
        assert self.store is not None, "pages read before `bind`"
        missing = [n for n in range(self.pages) if n not in self.loaded]
        if not missing:
            return
        names = [dump_key((*self.prefix, n)) for n in missing]
        for number, name, blob in zip(missing, names, self.store.get_many(names), strict=True):
            self._loaded(number, name, blob)

    def _page_of(self, identity: Any) -> dict:
        hashed = identity if self.hashed is None else identity[: self.hashed]
        return self._page(page_of(hashed, self.pages))

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

    def prune(self, alive: Callable[[Any], bool]) -> None:
        """Drop the expired entries (`alive` false) of the pages read so far. Once every page
        has been read, the count is theirs: a page that Spark's TTL removed (every row in it had
        expired) is no longer counted."""
        for _name, _blob, rows in self.loaded.values():
            for identity in [i for i, entry in rows.items() if not alive(entry)]:
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
    rows: dict | PagedRows, store: EntryStore, key: Any, side: int, hashed: int | None = None
) -> dict | PagedRows:
    """A side's rows as they are to be stored after a micro-batch, their changed pages written:
    inline while few, else in pages (placed by the first `hashed` columns of their identities,
    `PagedRows`), resized when they hold over twice `PAGE_ROWS` rows on average or under half."""
    count, pages = len(rows), pages_for(len(rows))
    if isinstance(rows, PagedRows):
        if count > INLINE_ROWS // 2 and rows.pages // 2 <= pages <= 2 * rows.pages:
            rows.flush()
            return rows
        version, rows = rows.version + 1, rows.drop()
        if count <= INLINE_ROWS // 2:
            return rows
    elif count <= INLINE_ROWS:
        return rows
    else:
        version = 0
    paged = PagedRows(pages, 0, version, hashed)
    paged.bind(store, key, side)
    paged.read_all()  # in one call, not one a page as the rows fill them
    paged.update(rows)
    paged.flush()
    return paged
