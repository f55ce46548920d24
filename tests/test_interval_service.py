"""`streamjoin run` with an interval join (orders and shipments) through a real broker."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.alerting import assert_monitoring_reads_what_is_served, assert_promtool_accepts
from tests.kafka_io import join_topics, produce, read_topic
from tests.service import Service, service_env
from tests.test_join_service import scrape
from tests.test_service import wait_for

pytestmark = pytest.mark.spark


def at(hour: int, minute: int = 0) -> str:
    return f"2026-11-22 {hour:02d}:{minute:02d}:00.000"


ORDERS = [("o1", at(1)), ("o2", at(2)), ("o3", at(3)), ("o4", at(10))]
SHIPMENTS = [("s1", "o1", at(3)), ("s3", "o3", at(5)), ("s4", "o3", at(6)), ("s2", "o2", at(7))]
# later rows only move both watermarks past every window above
LATER_ORDERS = [("o9", at(23))]
LATER_SHIPMENTS = [("s9", "o9", at(23, 30))]


def shipped_orders_env(
    kafka: str,
    orders: str,
    shipments: str,
    out: str,
    checkpoint: Path,
    kind: str,
    hours: int,
    **more: str,
) -> dict[str, str]:
    """`streamjoin run`'s variables for an interval join of orders with their shipments, the
    order no more than `hours` before its shipment."""
    return service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=orders,
        RIGHT_TOPIC=shipments,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(checkpoint),
        TRIGGER_INTERVAL="200ms",
        LEFT_SCHEMA="order_id STRING, ot TIMESTAMP(3)",
        LEFT_TIME="ot",
        RIGHT_SCHEMA="ship_id STRING, order_id STRING, st TIMESTAMP(3)",
        RIGHT_TIME="st",
        JOIN_TYPE="interval",
        JOIN_KIND=kind,
        OUTPUT_ENCODING="append",
        JOIN_ON=f"L.order_id = R.order_id AND L.ot BETWEEN R.st - INTERVAL '{hours}' HOUR AND R.st",
        JOIN_SELECT="L.order_id, R.ship_id",
        **more,
    )


def note_of(order_id: str) -> str:
    """A note of several kilobytes an order carries: enough for its state's bucket to be
    stored packed (`state.store.encoding.dump_packed`), varied enough not to pack to nothing."""
    return "".join(hashlib.sha256(f"{order_id}/{i}".encode()).hexdigest() for i in range(100))


def test_a_left_interval_join_emits_matches_and_pads_orders_whose_window_closed(
    kafka: str, tmp_path: Path
) -> None:
    orders, shipments, out = join_topics(kafka)
    produce(
        kafka,
        orders,
        [json.dumps({"order_id": o, "ot": t, "note": note_of(o)}).encode() for o, t in ORDERS],
    )
    produce(
        kafka,
        shipments,
        [json.dumps({"ship_id": s, "order_id": o, "st": t}).encode() for s, o, t in SHIPMENTS],
    )
    env = shipped_orders_env(kafka, orders, shipments, out, tmp_path / "ck", "left", 4)
    # the orders padded below come out of a stored bucket, their notes with them; their
    # times are TIMESTAMP_LTZ, which the output writes with Flink's `Z`
    env.update(
        LEFT_SCHEMA="order_id STRING, ot TIMESTAMP_LTZ(3), note STRING",
        JOIN_SELECT="L.order_id, R.ship_id, L.note, L.ot",
    )
    expected = {("o1", "s1"), ("o3", "s3"), ("o3", "s4"), ("o2", None), ("o4", None)}

    def output() -> list[tuple]:
        return [
            (v["order_id"], v["ship_id"])
            for v in map(json.loads, (r.value for r in read_topic(kafka, out)))
        ]

    service = Service(env, tmp_path / "log")
    try:
        wait_for(
            lambda: {("o1", "s1"), ("o3", "s3"), ("o3", "s4")} <= set(output()),
            240,
            "the matches never came",
            service,
        )
        values = map(json.loads, (r.value for r in read_topic(kafka, out)))
        times = {v["order_id"]: v["ot"] for v in values}
        assert times["o1"] == "2026-11-22 01:00:00Z"
        wait_for(
            lambda: metric(service, "streamjoin_watermark_seconds") is not None,
            60,
            "no watermark on /metrics",
            service,
        )
        first_watermark = metric(service, "streamjoin_watermark_seconds")
        wait_for(lambda: state_rows(service) > 0, 60, "no state rows on /metrics", service)
        first_state_rows = state_rows(service)
        produce(
            kafka,
            orders,
            [
                json.dumps({"order_id": o, "ot": t, "note": note_of(o)}).encode()
                for o, t in LATER_ORDERS
            ],
        )
        produce(
            kafka,
            shipments,
            [
                json.dumps({"ship_id": s, "order_id": o, "st": t}).encode()
                for s, o, t in LATER_SHIPMENTS
            ],
        )
        wait_for(
            lambda: expected <= set(output()),
            120,
            "the unmatched orders were never padded",
            service,
        )
        wait_for(
            lambda: metric(service, "streamjoin_watermark_seconds") > first_watermark,
            60,
            "the watermark on /metrics did not move",
            service,
        )
        wait_for(
            lambda: state_rows(service) < first_state_rows,
            60,
            "state rows on /metrics did not fall behind the watermark",
            service,
        )
        # a shipment for an order long gone: behind the watermark, counted as late
        produce(
            kafka,
            shipments,
            [json.dumps({"ship_id": "s0", "order_id": "o0", "st": at(4)}).encode()],
        )
        wait_for(
            lambda: metric(service, 'streamjoin_late_rows_total{side="right"}') == 1,
            60,
            "the late shipment was not counted",
            service,
        )
        page = scrape(service)
        # the test rows are dated later today: the lag may be negative
        assert re.search(r"^streamjoin_watermark_lag_seconds -?\d", page, re.M)
        assert metric(service, 'streamjoin_changes_total{kind="\\+I"}') >= 5
        assert metric(service, 'streamjoin_event_time_max_seconds{side="left"}') > 0
        lag = rf'streamjoin_kafka_lag_records{{partition="0",topic="{orders}"}}'
        assert metric(service, lag) == 0  # everything produced was processed
        assert re.search(r'^streamjoin_state_entries\{operator="\d+-\w+"\} \d', page, re.M)
        assert_monitoring_reads_what_is_served(page)
        assert endpoint(service, "/readyz") == "ready\n"
        assert endpoint(service, "/healthz") == "ok\n"
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    records = read_topic(kafka, out)
    values = [json.loads(r.value) for r in records]
    rows = [(v["order_id"], v["ship_id"]) for v in values]
    assert sorted((r for r in rows if r[0] != "o9"), key=str) == sorted(expected, key=str)
    assert all(r.header("op") == b"+I" for r in records)
    assert all(v["note"] == note_of(v["order_id"]) for v in values)
    assert_promtool_accepts(page.encode())  # last: where promtool is missing, the test says so


def skewed_backlog(partitions: int, per_partition: int, behind: int) -> tuple[list, list]:
    """Orders and their shipments (30 minutes later), one every 10 minutes in each partition,
    produced so that record `i` lands in partition `i % partitions` (`produce`): the last
    partition's run `behind` hours behind the others' in event time."""
    orders, shipments = [], []
    for n in range(per_partition):
        for p in range(partitions):
            minutes = n * 10 - (behind * 60 if p == partitions - 1 else 0)
            ordered = datetime(2026, 11, 22, 12) + timedelta(minutes=minutes)
            shipped = ordered + timedelta(minutes=30)
            orders.append({"order_id": f"o{p}-{n}", "ot": f"{ordered:%Y-%m-%d %H:%M:%S}.000"})
            shipments.append(
                {
                    "ship_id": f"s{p}-{n}",
                    "order_id": f"o{p}-{n}",
                    "st": f"{shipped:%Y-%m-%d %H:%M:%S}.000",
                }
            )
    return orders, shipments


def test_an_interval_join_over_partitions_skewed_in_event_time_joins_every_pair(
    kafka: str, tmp_path: Path
) -> None:
    """A backlog of 4 partitions read 40 records a micro-batch, one partition five hours behind
    the others in event time. Flink's Kafka source keeps a watermark per partition, the input's
    the least of them, so none of that partition's rows is late and every pair joins; a
    watermark over the whole topic would pass its rows at the second micro-batch."""
    partitions, per_partition = 4, 20
    orders, shipments, out = join_topics(kafka, partitions)
    order_rows, shipment_rows = skewed_backlog(partitions, per_partition, behind=5)
    produce(kafka, orders, [json.dumps(r).encode() for r in order_rows], partitions)
    produce(kafka, shipments, [json.dumps(r).encode() for r in shipment_rows], partitions)
    env = shipped_orders_env(
        kafka,
        orders,
        shipments,
        out,
        tmp_path / "ck",
        "inner",
        1,
        MAX_RECORDS_PER_TRIGGER="40",
        STATE_PARTITIONS="2",
    )
    expected = {(s["order_id"], s["ship_id"]) for s in shipment_rows}

    def joined() -> set[tuple]:
        return {
            (v["order_id"], v["ship_id"])
            for v in map(json.loads, (r.value for r in read_topic(kafka, out)))
        }

    def late() -> float:
        return sum(
            metric(service, f'streamjoin_late_rows_total{{side="{side}"}}') or 0
            for side in ("left", "right")
        )

    lagging = datetime(2026, 11, 22, 7, tzinfo=UTC).timestamp()

    def at_the_lagging_partition() -> bool:
        """Every partition moved the watermark: it stands at the lagging partition's rows (as
        of the micro-batch after the last pair's, which the watermark's move runs)."""
        watermark = metric(service, "streamjoin_watermark_seconds")
        return watermark is not None and lagging < watermark < lagging + per_partition * 600

    service = Service(env, tmp_path / "log")
    try:
        wait_for(
            lambda: (joined() == expected and at_the_lagging_partition()) or late() > 0,
            300,
            "the pairs never all came, or the watermark never reached the lagging partition",
            service,
        )
        assert late() == 0
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert joined() == expected


def send(kafka: str, topics: tuple[str, str], order_rows: list, shipment_rows: list) -> None:
    """Orders `(order_id, ot)` and shipments `(ship_id, order_id, st)` to partition 0 of the
    orders' and the shipments' topics."""
    orders, shipments = topics
    produce(kafka, orders, [json.dumps({"order_id": o, "ot": t}).encode() for o, t in order_rows])
    shipped = [{"ship_id": s, "order_id": o, "st": t} for s, o, t in shipment_rows]
    produce(kafka, shipments, [json.dumps(row).encode() for row in shipped])


def test_early_fire_pads_an_order_before_its_window_closes_and_corrects_it_on_its_shipment(
    kafka: str, tmp_path: Path
) -> None:
    """`JOIN_EARLY_FIRE_DELAY=10m` (Flink's `EARLY_FIRE`, FLIP-497): o1 (1:00) still unshipped
    once the watermark is at 2:00 comes out padded then, 3 h before its window closes, and its
    shipment at 3:00 turns the padded row into the joined one."""
    orders, shipments, out = join_topics(kafka)

    def output() -> list[tuple]:
        values = map(json.loads, (r.value for r in read_topic(kafka, out)))
        return [(v["op"], v["order_id"], v["ship_id"]) for v in values]

    send(kafka, (orders, shipments), [("o1", at(1)), ("o2", at(2))], [("s0", "o0", at(2))])
    env = shipped_orders_env(kafka, orders, shipments, out, tmp_path / "ck", "left", 4)
    early = {"OUTPUT_ENCODING": "retract", "JOIN_EARLY_FIRE_DELAY": "10m"}
    service = Service(env | early, tmp_path / "log")
    try:
        wait_for(lambda: output() == [("+I", "o1", None)], 240, "o1 was not fired", service)
        send(kafka, (orders, shipments), [], [("s1", "o1", at(3))])
        corrected = [("+I", "o1", None), ("-U", "o1", None), ("+U", "o1", "s1")]
        wait_for(lambda: output() == corrected, 120, "o1 was not corrected", service)
    finally:
        assert service.terminate() == 0, service.log()[-3000:]


def test_late_rows_go_to_the_dead_letter_topic_with_the_watermark_they_missed(
    kafka: str, tmp_path: Path
) -> None:
    """`LATE_ROWS=dead-letter`: once the watermark is at 9:00, an order of 4:00 and a shipment
    of 4:00 are late. Flink's join would pad the order at once and cache nothing; here both
    go to the dead-letter topic instead, with the watermark they missed, counted per input."""
    orders, shipments, out = join_topics(kafka)

    def output() -> list[tuple]:
        values = map(json.loads, (r.value for r in read_topic(kafka, out)))
        return [(v["order_id"], v["ship_id"]) for v in values]

    send(
        kafka,
        (orders, shipments),
        [("o1", at(1)), ("o9", at(9))],
        [("s1", "o1", at(3)), ("s9", "o9", at(9, 30))],
    )
    env = shipped_orders_env(kafka, orders, shipments, out, tmp_path / "ck", "left", 4)
    service = Service(env | {"LATE_ROWS": "dead-letter"}, tmp_path / "log")
    nine = int(datetime(2026, 11, 22, 9, tzinfo=UTC).timestamp())
    try:
        wait_for(
            lambda: (metric(service, "streamjoin_watermark_seconds") or 0) >= nine,
            240,
            "the watermark never reached 9:00",
            service,
        )
        send(kafka, (orders, shipments), [("o5", at(4))], [("s0", "o0", at(4))])
        dead = read_topic(kafka, f"{out}.dlq", at_least=2)
        for side in ("left", "right"):
            counted = f'streamjoin_dead_letters_total{{input="{side}",reason="late"}}'
            wait_for(lambda c=counted: metric(service, c) == 1, 60, f"{counted} != 1", service)
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert sorted((json.loads(r.value) for r in dead), key=str) == sorted(
        [{"order_id": "o5", "ot": at(4)}, {"ship_id": "s0", "order_id": "o0", "st": at(4)}],
        key=str,
    )
    for letter in dead:
        assert letter.header("streamjoin.error.reason") == b"late"
        assert int(letter.header("streamjoin.watermark")) >= nine * 1000
        assert int(letter.header("streamjoin.event.time")) < nine * 1000
    assert {r.header("streamjoin.source.topic") for r in dead} == {
        orders.encode(),
        shipments.encode(),
    }
    assert ("o5", None) not in output() and ("o1", "s1") in output()


@contextlib.contextmanager
def quiet_after_o1(
    kafka: str, tmp_path: Path, partitions: int
) -> Iterator[tuple[Service, tuple[str, str], Callable[[], list[tuple]]]]:
    """A LEFT interval join under `SOURCE_IDLE_TIMEOUT=2s` (Flink's
    `table.exec.source.idle-timeout`) on topics of `partitions`, o1 (1:00) and a shipment of
    2:00 read, then nothing for longer than the timeout: the service, the orders' and the
    shipments' topics, and what it wrote as `(order_id, ship_id)`."""
    orders, shipments, out = join_topics(kafka, partitions)

    def output() -> list[tuple]:
        values = map(json.loads, (r.value for r in read_topic(kafka, out)))
        return [(v["order_id"], v["ship_id"]) for v in values]

    send(kafka, (orders, shipments), [("o1", at(1))], [("s0", "o0", at(2))])
    env = shipped_orders_env(kafka, orders, shipments, out, tmp_path / "ck", "left", 4)
    service = Service(env | {"SOURCE_IDLE_TIMEOUT": "2s"}, tmp_path / "log")
    try:
        wait_for(lambda: state_rows(service) > 0, 240, "o1 was never read", service)
        time.sleep(3)  # the idle timeout is wall-clock time: what its passing does is under test
        yield service, (orders, shipments), output
    finally:
        assert service.terminate() == 0, service.log()[-3000:]


def test_a_partition_that_never_writes_holds_the_watermark_only_until_the_idle_timeout(
    kafka: str, tmp_path: Path
) -> None:
    """Orders and shipments on partition 0 of two; partition 1 never writes. As in Flink, a
    partition that has shown no row holds its input's watermark, so o1's window would never
    close; quiet for the idle timeout it stops holding it, and the next records move the
    watermark: o1, unshipped, comes out padded."""
    with quiet_after_o1(kafka, tmp_path, 2) as (service, topics, output):
        send(kafka, topics, [("o9", at(9))], [("s9", "o9", at(9, 30))])
        wait_for(lambda: ("o1", None) in output(), 120, "o1 was never padded", service)
    assert ("o9", "s9") in output()


def test_an_input_gone_quiet_stops_holding_the_watermark_and_takes_part_when_it_writes(
    kafka: str, tmp_path: Path
) -> None:
    """Shipments stop at 2:00 while orders go on to 9:00. Spark's watermark is the least of its
    inputs', so o1 (its window open until the shipments pass 5:00) would wait for the next
    shipment for ever; quiet for the idle timeout, the shipments leave the watermark, as an
    idle source in Flink, and o1 comes out padded. A shipment of 3:00 then is late."""
    with quiet_after_o1(kafka, tmp_path, 1) as (service, topics, output):
        send(kafka, topics, [("o9", at(9))], [])
        wait_for(lambda: ("o1", None) in output(), 120, "o1 was never padded", service)
        send(kafka, topics, [], [("s3", "o3", at(3))])
        wait_for(
            lambda: metric(service, 'streamjoin_late_rows_total{side="right"}') == 1,
            60,
            "the shipment of 3:00 was not late",
            service,
        )


def state_rows(service: Service) -> float:
    """The rows the join's state holds, both sides, from `/metrics`."""
    rows = re.findall(r"^streamjoin_state_rows\{.*\} (\S+)$", scrape(service), re.M)
    return sum(map(float, rows))


def metric(service: Service, name: str) -> float | None:
    found = re.search(rf"^{name} (\S+)$", scrape(service), re.M)
    return float(found.group(1)) if found else None


def endpoint(service: Service, path: str) -> str:
    with urllib.request.urlopen(f"{service.endpoint()}{path}", timeout=5) as answer:
        return answer.read().decode()
