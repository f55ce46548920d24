"""Changelog normalization (Flink's ChangelogNormalize) and the upsert format, without Spark."""

from __future__ import annotations

import pandas as pd
from pyspark.sql.streaming.tws_tester import TwsTester

from serdes.records.formats import UpsertJsonFormat
from serdes.records.schema import parse_schema
from state.joins.normalize import normalize
from tests.frames import normalizer_frame

A1, A2 = ("a", 1), ("a", 2)


def run(changes: list[tuple[str, tuple]]) -> list[tuple[str, tuple]]:
    """One change per batch, the key's last row carried from batch to batch."""
    last, out = None, []
    for seq, (op, row) in enumerate(changes):
        emitted, last = normalize(last, [(op, seq, None, row)])
        out += [(c.kind, c.left) for c in emitted]
    return out


def test_upserts_become_a_full_changelog() -> None:
    assert run([("+U", A1), ("+U", A2), ("-D", ("a", None))]) == [
        ("+I", A1),
        ("-U", A1),
        ("+U", A2),
        ("-D", A2),
    ]


def test_an_update_without_before_image_retracts_the_real_old_row() -> None:
    assert run([("+I", A1), ("+U", A2)]) == [("+I", A1), ("-U", A1), ("+U", A2)]


def test_repeats_and_unknown_deletes_emit_nothing() -> None:
    assert run([("-D", A1), ("+I", A1), ("+U", A1)]) == [("+I", A1)]


def test_a_lone_retraction_deletes_the_stored_row_as_flink_does() -> None:
    assert run([("+I", A1), ("-U", A1), ("+U", A2)]) == [("+I", A1), ("-D", A1), ("+I", A2)]


def test_a_whole_update_stays_an_update_with_its_own_times_and_seqs() -> None:
    """Debezium's `-U before` `+U after` of one record: an update, as Flink passes it on, the
    `before` image with its own time (a versioned table's time column holds the old row's)."""
    before = ("a", 1, "as the database had it")
    out, last = normalize((A1, 10), [("-U", 6, 12, before), ("+U", 7, 20, A2)])
    assert [(c.kind, c.seq, c.ts, c.left) for c in out] == [
        ("-U", 14, 12, before),
        ("+U", 15, 20, A2),
    ]
    assert last == (A2, 20)


def test_an_upsert_retracts_the_old_row_at_the_time_it_was_stored_with() -> None:
    out, last = normalize((A1, 10), [("+U", 7, 20, A2), ("-D", 9, None, ("a", None))])
    assert [(c.kind, c.seq, c.ts, c.left) for c in out] == [
        ("-U", 14, 10, A1),
        ("+U", 15, 20, A2),
        ("-D", 18, 20, A2),
    ]
    assert last is None


def test_the_processor_keeps_the_last_row_between_batches() -> None:
    tester = TwsTester(normalizer_frame(("id", "v"), {"L_v": "integral"}))

    def batch(*changes: tuple) -> list[tuple]:
        ops, seqs, times, rows = zip(*changes, strict=True)
        ids, values = zip(*rows, strict=True)
        frame = pd.DataFrame(
            {"op": ops, "seq": seqs, "ts": times, "k0": ids, "L_id": ids, "L_v": values}
        )
        out = tester.testInPandas(7, frame)
        rows_out = zip(out["L_id"], out["L_v"], strict=True)
        return list(zip(out["op"], out["seq"], out["ts"], rows_out, strict=True))

    assert batch(("+U", 4, 20, A2), ("+U", 2, 10, A1)) == [
        ("+I", 4, 10, A1),
        ("-U", 8, 10, A1),
        ("+U", 9, 20, A2),
    ]
    assert batch(("-D", 6, 30, ("a", None))) == [("-D", 12, 30, A2)]
    assert tester.peekMapState("keys", 7) == {}


def test_under_a_state_ttl_a_keys_last_row_expires_as_the_joins_rows_do() -> None:
    """The normalizer forgets a key when the join forgets its row (the same TTL, counted from
    the same write), so it never retracts a row the join no longer holds; and it passes on an
    update equal to the last row, which refreshes the join's copy, as Flink's does."""
    tester = TwsTester(
        normalizer_frame(("id", "v"), {"L_v": "integral"}, ttl_ms=60_000), timeMode="ProcessingTime"
    )

    def batch(at: int, op: str, row: tuple) -> list[tuple]:
        if at:
            tester.setProcessingTime(at)
        frame = pd.DataFrame(
            {"op": [op], "seq": [at], "ts": [at], "k0": [row[0]], "L_id": [row[0]], "L_v": [row[1]]}
        )
        out = tester.testInPandas(7, frame)
        if out.empty:
            return []
        return list(zip(out["op"], zip(out["L_id"], out["L_v"], strict=True), strict=True))

    assert batch(0, "+U", A1) == [("+I", A1)]
    assert batch(30_000, "+U", A1) == [("-U", A1), ("+U", A1)]  # refreshed: lives to 90 s
    assert batch(80_000, "+U", A2) == [("-U", A1), ("+U", A2)]
    assert batch(140_000, "+U", A1) == [("+I", A1)]  # A2, written at 80 s, has expired
    assert batch(200_000, "-D", ("a", None)) == []  # so has A1: nothing to delete


def test_upsert_records_decode_from_key_and_value() -> None:
    fmt = UpsertJsonFormat(parse_schema("id STRING, v INT"), ["id"])
    assert fmt.decode(b'{"id": "a"}', b'{"v": 1}') == [("+U", A1)]
    assert fmt.decode(b"a", b'{"id": "a", "v": 2}') == [("+U", A2)]
    assert fmt.decode(b'"a"', None) == [("-D", ("a", None))]
