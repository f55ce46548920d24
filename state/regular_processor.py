"""The regular join's spec and its bucketed `transformWithStateInPandas` processor.

The join's semantics, per join key, are those of `state.regular_join` over the views of
`state.views`; the frame (buckets of keys, columns instead of Rows) is
`state.bucketed_processor`'s, shared with the interval and temporal joins. Each join key's
views are one `MapState` entry of its bucket (`KeyedEntries`): a micro-batch reads the keys its
rows name, once each, and writes back those whose views changed. A regular join's state is
bounded by nothing but its keys, so one entry per key is what keeps a batch's cost to what it
touches (see `docs/design.md`).

Retention (`STATE_TTL`, Flink's `table.exec.state.ttl`) is per row, as in Flink
(`state.retention`): each row of a view expires on its own, a micro-batch drops the expired rows
of the keys it touches, and Spark's TTL on the entries removes the keys no batch touches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.bucketed_processor import (
    BUCKET_STATE,
    ENTRY_KEY,
    PROCTIME,
    BucketedJoinProcessor,
    BucketedJoinSpec,
    Emitted,
    Held,
    InputRows,
    KeyedEntries,
    MapEntries,
    SideSpec,
)
from state.condition import JoinCondition, parse_condition, split_condition
from state.keyed_state import KeyedBucket, held_by_expiry, never
from state.pages import PagedRows, settle
from state.regular_join import RegularJoin, SemiAntiJoin
from state.retention import FOREVER, Retention
from state.views import (
    MultisetView,
    UniqueKeyView,
    View,
    new_view,
    views_from_plain,
    views_size,
    views_to_plain,
)


@dataclass(frozen=True)
class RegularJoinSpec(BucketedJoinSpec):
    """Everything the processor needs, small and picklable: it travels to the executors."""

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    state_ttl_ms: int = 0  # idle state retention; 0 keeps state forever
    buckets: int = 128

    @property
    def left_time(self) -> str:  # type: ignore[override]
        """A regular join's only clock is processing time, for retention."""
        return PROCTIME

    @property
    def time_mode(self) -> str:
        """Retention is processing-time TTL; without it the join needs no clock."""
        return "ProcessingTime" if self.state_ttl_ms > 0 else "None"

    @cached_property
    def join_condition(self) -> JoinCondition:
        return split_condition(parse_condition(self.on))

    @property
    def projects_right(self) -> bool:
        """SEMI and ANTI joins output left rows only."""
        return self.kind not in ("semi", "anti")

    def operator(self) -> RegularJoin | SemiAntiJoin:
        if self.kind in ("semi", "anti"):
            return SemiAntiJoin(self.kind, self.matcher())
        return RegularJoin(self.kind, self.matcher())

    def new_views(self, retention: Retention = FOREVER) -> tuple[View, View]:
        left_keys = [a for a, _ in self.equi_keys]
        right_keys = [b for _, b in self.equi_keys]
        return (
            new_view(left_keys, self.left.fields, self.left.unique_key, retention),
            new_view(right_keys, self.right.fields, self.right.unique_key, retention),
        )


class RegularJoinProcessor(BucketedJoinProcessor):
    """Flink's regular join (`state.regular_join`) per key, over buckets of keys; a side with
    many rows for one key keeps them in pages (`state.pages`), a `MapState` of their own."""

    def layout(self, handle: StatefulProcessorHandle) -> KeyedEntries:
        self.retention = Retention(self.spec.state_ttl_ms)
        ttl = self.retention.store_ttl_ms
        self.pages = MapEntries(handle.getMapState("pages", ENTRY_KEY, BUCKET_STATE, ttl))
        return KeyedEntries(handle, views_to_plain, self._views_from_plain, never, views_size,
                            ttl)  # fmt: skip

    def _views_from_plain(self, plain: tuple) -> tuple[View, View]:
        return views_from_plain(plain, self.retention)

    def held(self, bucket: KeyedBucket) -> tuple[Held, Held]:
        """Rows per side (distinct rows of a side without a unique key), by when Spark's TTL
        drops them: the counts kept in the bucket's own value."""
        return held_by_expiry(bucket.keys.ledger, 0), held_by_expiry(bucket.keys.ledger, 1)

    def _views(self, bucket: KeyedBucket, key: Any) -> tuple[View, View]:
        """A key's views, their pages (if any) read from this bucket's pages when used."""
        views = bucket.keys.get(key)
        if views is None:
            return self.spec.new_views(self.retention)
        for side, view in enumerate(views):
            rows = getattr(view, "rows", None)
            if isinstance(rows, PagedRows):
                rows.bind(self.pages, key, side)
        return views

    def fire_due(self, bucket: Any, now: int) -> list[Emitted]:
        """A regular join waits for no time."""
        return []

    def apply(self, bucket: KeyedBucket, rows: InputRows, now: int) -> list[Emitted]:
        self.retention.at(now)
        emitted: list[Emitted] = []
        touched: dict[Any, tuple[View, View]] = {}
        bucket.keys.prefetch(rows.keys)
        for i in rows.order():
            key = rows.keys[i]
            views = touched.get(key)
            if views is None:
                views = touched[key] = bucket.keys[key] = self._views(bucket, key)
            for change in self.join.process(rows.sides[i], rows.ops[i], rows.row(i), views):
                emitted.append((change.op, change.left, change.right))
        for key, views in touched.items():
            for side, view in enumerate(views):
                view.prune()
                if isinstance(view, UniqueKeyView | MultisetView):
                    view.rows = settle(view.rows, self.pages, key, side)
            if not any(len(view) for view in views):
                del bucket.keys[key]  # an emptied key leaves no entry
        return emitted
