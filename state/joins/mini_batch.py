"""Folding one micro-batch's changes of a join key before the join sees them, as Flink's
mini-batch join does (FLIP-415, `table.exec.mini-batch.enabled`).

A key's changes within one micro-batch are folded per input: an insert and its retraction
cancel, an update's -U/+U pair collapses into what it leaves, so the join emits for what each
input became, not for each step on the way. The final tables are those without folding; the
changelog is shorter (a chain of joins passes fewer changes on).

With a unique key (an input's primary key), per unique key, the last change against the one
before it (Flink's `JoinKeyContainsUniqueKeyBundle` / `InputSideHasUniqueKeyBundle`):

| before the last | the last | kept |
| --- | --- | --- |
| +I | +U | the +U, as +I |
| +I / +U | +I | the +I |
| +U | +U | the last +U |
| -D / -U | -D / -U | the last |
| +I | -U / -D | neither; a +U after them is kept as +I (nothing came before it) |
| +U | -U / -D | neither |
| -D / -U | +I / +U | both |

Without a unique key (Flink's `InputSideHasNoUniqueKeyBundle`), an accumulating change and a
retraction of the very same row cancel, whichever came first; every other change is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from state.changes import RowKind

ACCUMULATE = RowKind.ACCUMULATE


def fold_by_unique_key(kinds: Sequence[str]) -> list[tuple[int, str]]:
    """One unique key's changes in arrival order, folded: (position, kind) of those kept, the
    kind corrected where the table above says so."""
    kept: list[tuple[int, str]] = []
    inserted_then_cleared = False
    for position, kind in enumerate(kinds):
        if inserted_then_cleared and kind == "+U":
            kind = "+I"
        inserted_then_cleared = False
        if kept:
            _last_position, last = kept[-1]
            if last in ACCUMULATE:
                kept.pop()
                if kind not in ACCUMULATE:
                    inserted_then_cleared = last == "+I"
                    continue
                if last == "+I" and kind == "+U":
                    kind = "+I"
            elif kind not in ACCUMULATE:
                kept.pop()
        kept.append((position, kind))
    return kept


def fold_by_row(kinds: Sequence[str], rows: Sequence[Hashable]) -> list[tuple[int, str]]:
    """Changes of an input without a unique key, in arrival order: an accumulating change and a
    retraction of an equal row cancel (the latest such earlier one); (position, kind) kept."""
    kept: list[tuple[int, str] | None] = []
    by_row: dict[Hashable, list[int]] = {}  # row -> indexes into `kept`, oldest first
    for position, (kind, row) in enumerate(zip(kinds, rows, strict=True)):
        earlier = by_row.setdefault(row, [])
        for index in reversed(earlier):
            other = kept[index]
            if other is not None and (other[1] in ACCUMULATE) != (kind in ACCUMULATE):
                kept[index] = None
                earlier.remove(index)
                break
        else:
            earlier.append(len(kept))
            kept.append((position, kind))
    return [k for k in kept if k is not None]


def folded(
    changes: Sequence[tuple[int, str, Hashable]], unique_key: Callable[[Hashable], Hashable] | None
) -> list[tuple[int, str]]:
    """One input's changes of one join key, (position, kind, row) in arrival order, folded:
    (position, kind) of those kept, in arrival order. `unique_key`: the input's key of a row,
    None where it has none."""
    if unique_key is None:
        kept = fold_by_row([kind for _, kind, _ in changes], [row for _, _, row in changes])
    else:
        groups: dict[Hashable, list[int]] = {}
        for index, (_position, _kind, row) in enumerate(changes):
            groups.setdefault(unique_key(row), []).append(index)
        kept = [
            (members[i], kind)
            for members in groups.values()
            for i, kind in fold_by_unique_key([changes[m][1] for m in members])
        ]
    return [(changes[index][0], kind) for index, kind in sorted(kept)]
