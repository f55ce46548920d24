"""Spark's own stream-stream join on Nexmark's q3 and q20, the baseline `bench/nexmark_service.py`
sets beside the service: Spark's Kafka connector reads the topic (once per view, as the
service reads it), Spark's JSON reader the nested rows, the views' filters and the queries'
WHERE as Spark's optimizer places them, an inner join without watermarks (a run over a topic
that ends), Spark's `noop` sink as the blackhole, the available-now trigger.

    python bench/nexmark_spark.py --bootstrap HOST:PORT --topic nexmark q3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.jars import fetched
from app.run.session import build_session

CONNECTOR_JARS = Path(__file__).with_name("spark_kafka_jars.txt")
# Nexmark's Kafka table (`bench/nexmark/ddl_kafka.sql`) as Spark's DDL
EVENT = (
    "event_type INT, "
    "person STRUCT<id: BIGINT, name: STRING, emailAddress: STRING, creditCard: STRING, "
    "city: STRING, state: STRING, dateTime: TIMESTAMP, extra: STRING>, "
    "auction STRUCT<id: BIGINT, itemName: STRING, description: STRING, initialBid: BIGINT, "
    "reserve: BIGINT, dateTime: TIMESTAMP, expires: TIMESTAMP, seller: BIGINT, "
    "category: BIGINT, extra: STRING>, "
    "bid STRUCT<auction: BIGINT, bidder: BIGINT, price: BIGINT, channel: STRING, url: STRING, "
    "dateTime: TIMESTAMP, extra: STRING>"
)


def view(spark: SparkSession, bootstrap: str, topic: str, kind: str, code: int) -> DataFrame:
    """One of Nexmark's views: the topic's records of one kind, its row's fields."""
    events = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(
            F.from_json(
                F.col("value").cast("string"),
                EVENT,
                {"timestampFormat": "yyyy-MM-dd HH:mm:ss.SSS"},
            ).alias("e")
        )
    )
    return events.where(F.col("e.event_type") == code).select(f"e.{kind}.*")


def query(spark: SparkSession, bootstrap: str, topic: str, name: str) -> DataFrame:
    auction = view(spark, bootstrap, topic, "auction", 1)
    if name == "q3":
        person = view(spark, bootstrap, topic, "person", 0)
        joined = auction.alias("A").join(person.alias("P"), F.expr("A.seller = P.id"))
        return joined.where("A.category = 10 AND P.state IN ('OR', 'ID', 'CA')").select(
            "P.name", "P.city", "P.state", "A.id"
        )
    bid = view(spark, bootstrap, topic, "bid", 2)
    joined = bid.alias("B").join(auction.alias("A"), F.expr("B.auction = A.id"))
    return joined.where("A.category = 10").select(
        "B.auction", "B.bidder", "B.price", "B.channel", "B.url", "B.dateTime", "B.extra",
        "A.itemName", "A.description", "A.initialBid", "A.reserve", "A.dateTime", "A.expires",
        "A.seller", "A.category", "A.extra",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("query", choices=["q3", "q20"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", default="2", help="spark.sql.shuffle.partitions")
    args = parser.parse_args(argv)
    jars = fetched("spark_kafka", "Spark's Kafka connector", listing=CONNECTOR_JARS)
    conf = {"spark.jars": ",".join(map(str, jars)), "spark.sql.shuffle.partitions": args.partitions}
    with tempfile.TemporaryDirectory() as work:
        spark = build_session("local[2]", conf, checkpoint=work)
        output = query(spark, args.bootstrap, args.topic, args.query)
        writer = output.writeStream.format("noop").option("checkpointLocation", f"{work}/ck")
        writer.trigger(availableNow=True).start().awaitTermination()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
