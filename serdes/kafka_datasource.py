"""The `streamjoin-kafka` Python data source: Spark options in, Kafka reader and writer out.

Options (lower-cased by Spark): `topic`; `startingoffsets` (earliest, latest or JSON);
`maxrecordspertrigger`; `drainmarker` (a file whose existence means: offer no more records);
`transactionalid` and `markertopic` (the sink writes exactly-once when given; see
`serdes.kafka_transactions`); and `kafka.<property>` for every librdkafka client property.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from serdes.kafka_sink import KafkaStreamWriter
from serdes.kafka_source import SPARK_SCHEMA, KafkaStreamReader
from serdes.kafka_transactions import ExactlyOnce

NAME = "streamjoin-kafka"


def kafka_options(client_config: dict[str, str]) -> dict[str, str]:
    """Client properties as data source options (the inverse of `_client_config`)."""
    return {f"kafka.{k}": str(v) for k, v in client_config.items()}


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SPARK_SCHEMA

    def _client_config(self) -> dict[str, str]:
        return {k[len("kafka.") :]: v for k, v in self.options.items() if k.startswith("kafka.")}

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        limit = self.options.get("maxrecordspertrigger")
        return KafkaStreamReader(
            topic=self.options["topic"],
            client_config=self._client_config(),
            starting=self.options.get("startingoffsets", "earliest"),
            max_records=int(limit) if limit else None,
            drain_marker=self.options.get("drainmarker"),
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        transactional_id = self.options.get("transactionalid")
        exactly_once = (
            ExactlyOnce(transactional_id, self.options["markertopic"]) if transactional_id else None
        )
        return KafkaStreamWriter(self.options["topic"], self._client_config(), exactly_once)
