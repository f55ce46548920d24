"""The stateful frame around each operator, as the service builds it, for pyspark's TwsTester."""

from __future__ import annotations

import random

from app.run.joins import join_operator
from state.columns import ColumnLayout
from state.joins.specs import JoinSpec
from state.spark.frame import HeldRows, LateLetters, LateRows, StatefulFrame
from state.spark.normalizer import NormalizeOperator
from state.spark.upsert import UpsertMaterializeOperator


def join_frame(
    spec: JoinSpec,
    kinds: dict[str, str],
    late_rows: LateRows | None = None,
    held_rows: HeldRows | None = None,
    number: int = 1,
    late_letters: LateLetters | None = None,
    bounds: bool = False,
) -> StatefulFrame:
    """In: `k0..`, `side`, `op`, `seq`, `ts`, `bound` if `bounds`, `L_*`, `R_*`; out: `op`,
    `L_*`, `R_*`; as the job's `number`-th join (after the first, its left is the result of the
    one before)."""
    layout = ColumnLayout(
        max(1, len(spec.equi_keys)),
        (spec.left.fields, spec.right.fields),
        kinds,
        outputs=(0, 1) if spec.projects_right else (0,),
        bounds=bounds,
    )
    operator = join_operator(spec, number)
    return StatefulFrame(
        operator, layout, late_rows, held_rows, number > 1, late_letters=late_letters
    )


def normalizer_frame(
    fields: tuple[str, ...], kinds: dict[str, str], ttl_ms: int = 0
) -> StatefulFrame:
    """One primary-key column `k0`; in: `op`, `seq`, `ts`, `L_*`; out: `op`, `seq`, `ts`,
    `L_*`."""
    layout = ColumnLayout(1, (fields,), kinds, out_seq=True, out_ts=True, outputs=(0,))
    return StatefulFrame(NormalizeOperator("left", ttl_ms), layout)


def upsert_frame(width: int, kinds: dict[str, str]) -> StatefulFrame:
    """In: `op`, `seq`, the record key `k0`, the row `L_0..`; out: `op`, `k0`, `L_0..`."""
    fields = tuple(str(i) for i in range(width))
    layout = ColumnLayout(1, (fields,), kinds, times=False, outputs=(0,), out_key=True)
    return StatefulFrame(UpsertMaterializeOperator(), layout)


class RandomChanges:
    """Consistent random changelogs of orders (side 0: order_id, product_id, qty) and
    products (side 1: product_id, price) for a join's processor, a batch at a time: inserts,
    updates as -U/+U pairs, deletes (`delete_share` of the changes of a live key)."""

    def __init__(
        self, rng: random.Random, orders: int, products: int, delete_share: float = 0.3
    ) -> None:
        self.rng, self.orders, self.products = rng, orders, products
        self.delete_share = delete_share
        self.tables: tuple[dict[str, tuple], dict[str, tuple]] = ({}, {})
        self.seq = 0

    def _new(self, side: int) -> tuple:
        rng = self.rng
        if side == 0:
            oid = f"o{rng.randrange(self.orders)}"
            return (oid, f"p{rng.randrange(self.products)}", rng.randrange(1, 4))
        return (f"p{rng.randrange(self.products)}", rng.randrange(100))

    def batch(self, size: int) -> list[tuple]:
        """`size` changes, (side, kind, seq, row) each (an update two)."""
        rows: list[tuple] = []
        for _ in range(size):
            side = 0 if self.rng.random() < 0.55 else 1
            table, new = self.tables[side], self._new(side)
            key = new[0]
            self.seq += 2
            if key in table and self.rng.random() < self.delete_share:
                rows.append((side, "-D", self.seq, table.pop(key)))
            elif key in table:
                rows += [(side, "-U", self.seq, table[key]), (side, "+U", self.seq + 1, new)]
                table[key] = new
            else:
                rows.append((side, "+I", self.seq, new))
                table[key] = new
        return rows
