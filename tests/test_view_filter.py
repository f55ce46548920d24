"""A view of a JSON topic skips other views' records before parsing them, and never one it keeps:
whatever the record's spacing, escapes, nesting or number forms, a record the parse keeps passes
the filter of its bytes."""

from __future__ import annotations

import pyarrow as pa

from serdes.records.formats import JsonFormat
from serdes.records.schema import parse_schema
from serdes.records.values import DecodeError

BODIES = [
    b'"event_type":2,"bid":{"auction":7}',
    b'"event_type": 2 ,"bid":{"auction":7}',
    b'"event_type"\n:\t2}',
    b'"event_type":2.0',
    b'"event_type":2e0',
    b'"event_type":20e-1',
    b'"event_type":"2"',
    b'"event_type":-2',
    b'"event_type":-0',
    b'"event_type":20',
    b'"event_type":1',
    b'"event_type":0,"person":{"id":1}',
    b'"person":{"event_type":2},"event_type":1',
    b'"event_type":1,"event_type":2',
    b'"event\\u005ftype":2',
    b'"event_type":"\\u0032"',
    b'"event_type":2,"big":123456789012345678901234567890',
    b'"event_type":true',
    b'"event_type":" 2 "',
    b'"event_type":null',
    b'"kind":"bid"',
    b'"kind": "bid2"',
    b'"kind":"bi"',
    b'"kind":7',
    b'"kind":"b\\u0069d"',
    b'"event_type":2,"kind":"bid"',
    b'"a.b (c)+":7',
    b'"a.b (c)":7',
]
RECORDS = [
    *(b"{" + body + b"}" for body in BODIES),
    b'  {"event_type":2}',
    b'{"event_type":2',
    b"not json",
    b"",
    None,
]


def _view(where: list[tuple[str, object]]) -> JsonFormat:
    return JsonFormat(parse_schema("event_type BIGINT, kind STRING"), [], (), where, False)


def _kept(view: JsonFormat, record: bytes | None) -> bool:
    """Whether the parse keeps the record: a row, or a dead letter (its `WHERE` held, its row
    cannot be read)."""
    try:
        return bool(view.decode(None, record))
    except DecodeError:
        return True


def test_a_view_skips_only_records_it_would_not_keep() -> None:
    wheres = [("event_type", 2)], [("event_type", 0)], [("kind", "bid")], [("a.b (c)", 7)]
    for where in [*wheres, [("event_type", 2), ("kind", "bid")]]:
        view = _view(where)
        assert view.may_keep is not None
        passed = view.may_keep(pa.array(RECORDS, pa.binary())).to_pylist()
        kept = [_kept(view, record) for record in RECORDS]
        missed = [r for r, k, p in zip(RECORDS, kept, passed, strict=True) if k and not p]
        assert not missed, (where, missed)
        others = [b'{"event_type":1,"kind":"bi"}', b'{"event_type": -2, "kind": "bid2"}']
        assert view.may_keep(pa.array(others, pa.binary())).to_pylist() == [False, False]


def test_the_view_that_dead_letters_and_literals_not_told_from_bytes_parse_every_record() -> None:
    columns = parse_schema("event_type BIGINT, price DOUBLE")
    assert JsonFormat(columns, [], (), [("event_type", 2)], True).may_keep is None
    assert JsonFormat(columns, [], (), [("price", 2.5)], False).may_keep is None
    assert JsonFormat(columns, [], (), [("event_type", True)], False).may_keep is None
