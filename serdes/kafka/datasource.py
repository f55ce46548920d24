"""The `streamjoin-kafka` Python data source: Spark options in, Kafka reader and writer out.

`decoding_source` makes a variant that decodes as it reads (`serdes.kafka.decode.decoder`): the
records of one input leave the reading task as typed changes, its dead letters written by that
task. Decoding in a step of its own (`mapInArrow`) cost a second Python stage per record: the
JVM turned each source batch into rows, the rows back into Arrow for a second Python worker,
and its output into rows again.

Options (lower-cased by Spark): `topic`; `startingoffsets` (earliest, latest or JSON);
`maxrecordspertrigger`; `readtasks` (how many tasks read a micro-batch's partitions, one per
partition if unset); `drainmarker` (a file whose existence means: offer no more records);
`boundedatstart` (`true`: offer only what the topic held when the query started, as Spark's
available-now trigger does, under any trigger); `wakeatstart` (`true`: the first plan of every start
is a micro-batch, new records or none: see `KafkaStreamReader`);
`marksgroup` (the consumer group where the reading tasks keep each partition's largest event
time, for an input whose watermark is its partitions' least: see `serdes.kafka.event_times`);
`idletimeoutms` (a partition with no new record for this long leaves the input's watermark:
Flink's `table.exec.source.idle-timeout`), with `peers` (a JSON list of the query's other
event-time inputs, `{"group", "topic", "delay_ms"}`, for the heartbeats of a whole idle input:
`serdes.kafka.event_times`) and `watermarkdelayms` (this input's delay); `backlogtasks` (how
many tasks read such an input's micro-batch of a backlog: see `KafkaStreamReader.partitions`);
`waitfor` (a JSON list of topics: a trigger that found nothing new waits for a record on any of
them, see `serdes.kafka.arrivals`) and `waitms` (for at most this long); `backlogdir` (a folder
the query's readers share: each marks there whether its last plan left records unread, and the
waiting reader does not wait while one did);
`transactionalid` and `markertopic` (the sink writes exactly-once when given; see
`serdes.kafka.transactions`); and `kafka.<property>` for every librdkafka client property.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pyarrow as pa
from confluent_kafka import KafkaException
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from serdes.kafka.arrivals import IDLE_WAIT_MS
from serdes.kafka.broker_code import runs_kafka_code
from serdes.kafka.decode import arrow_schema
from serdes.kafka.event_times import Peer
from serdes.kafka.sink import KafkaStreamWriter
from serdes.kafka.source import SPARK_SCHEMA, KafkaStreamReader
from serdes.kafka.transactions import ExactlyOnce

NAME = "streamjoin-kafka"


def kafka_options(client_config: dict[str, str]) -> dict[str, str]:
    """Client properties as data source options (the inverse of `_client_config`)."""
    return {f"kafka.{k}": str(v) for k, v in client_config.items()}


Transform = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


class KafkaDataSource(DataSource):
    """Kafka records as they are (`SPARK_SCHEMA`); a subclass made by `decoding_source` sets
    `transform` and `row_schema` to read them decoded."""

    registered_name: str = NAME
    transform: Transform | None = None
    row_schema: StructType | str = SPARK_SCHEMA

    @classmethod
    def name(cls) -> str:
        return cls.registered_name

    def schema(self) -> StructType | str:
        return self.row_schema

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
            bounded=self.options.get("boundedatstart") == "true",
            wake=self.options.get("wakeatstart") == "true",
            transform=self.transform,
            tasks=int(tasks) if (tasks := self.options.get("readtasks")) else None,
            marks_group=self.options.get("marksgroup"),
            wait_for=json.loads(self.options.get("waitfor", "[]")),
            wait_ms=int(self.options.get("waitms", IDLE_WAIT_MS)),
            idle_timeout_ms=int(self.options.get("idletimeoutms", 0)),
            peers=[Peer(**peer) for peer in json.loads(self.options.get("peers", "[]"))],
            delay_ms=int(self.options.get("watermarkdelayms", 0)),
            schema=arrow_schema(schema) if self.transform is not None else None,
            backlog_dir=self.options.get("backlogdir"),
            backlog_tasks=int(self.options.get("backlogtasks", 1)),
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        transactional_id = self.options.get("transactionalid")
        exactly_once = (
            ExactlyOnce(transactional_id, self.options["markertopic"], self._guarded())
            if transactional_id
            else None
        )
        return KafkaStreamWriter(self.options["topic"], self._client_config(), exactly_once)

    def _guarded(self) -> bool:
        """Whether the sink guards against a broker that drops acknowledged commits: where it
        does not run Kafka's code, or does not say (it is asked again at the next start)."""
        try:
            return not runs_kafka_code(self._client_config())
        except KafkaException:
            return True


def decoding_source(name: str, transform: Transform, schema: StructType) -> type[KafkaDataSource]:
    """A data source registered as `name` whose reads come out through `transform` (raw Kafka
    batches in, `schema`'s batches out). The class is made here, not imported, so that Spark's
    pickling (cloudpickle) carries it by value, its decoder with it: data source options are
    strings, and the decoder holds a schema registry's client settings and an accumulator."""

    class Decoding(KafkaDataSource):
        registered_name = name
        row_schema = schema

    Decoding.transform = staticmethod(transform)  # type: ignore[assignment]
    return Decoding
