"""Avro output in the Confluent wire format, with the value schema registered at start-up.

The Avro schema is derived from the output's Spark schema (every field nullable), registered
under `<topic>-value` (the TopicNameStrategy Confluent clients use), and every value written as
magic byte 0, the 4-byte schema id, then the Avro body.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator
from typing import Any

import fastavro
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from serdes.records.avro import MAGIC_BYTE

_PRIMITIVES = {
    T.StringType: "string",
    T.BooleanType: "boolean",
    T.ByteType: "int",
    T.ShortType: "int",
    T.IntegerType: "int",
    T.LongType: "long",
    T.FloatType: "float",
    T.DoubleType: "double",
    T.BinaryType: "bytes",
}


class _SchemaBuilder:
    """Spark types to Avro types; a record type is defined once and referred to by name."""

    def __init__(self) -> None:
        self.records: dict[str, str] = {}  # Spark struct JSON -> Avro record name

    def type_of(self, spark_type: T.DataType, name: str) -> Any:
        if isinstance(spark_type, T.StructType):
            known = self.records.get(spark_type.json())
            if known:
                return known
            record_name = "".join(p.capitalize() for p in name.split("_")) or "Row"
            self.records[spark_type.json()] = record_name
            return {
                "type": "record",
                "name": record_name,
                "fields": [
                    {
                        "name": f.name,
                        "type": ["null", self.type_of(f.dataType, f.name)],
                        "default": None,
                    }
                    for f in spark_type.fields
                ],
            }
        if isinstance(spark_type, T.DecimalType):
            return {
                "type": "bytes",
                "logicalType": "decimal",
                "precision": spark_type.precision,
                "scale": spark_type.scale,
            }
        if isinstance(spark_type, T.TimestampType):
            return {"type": "long", "logicalType": "timestamp-millis"}
        if isinstance(spark_type, T.DateType):
            return {"type": "int", "logicalType": "date"}
        for spark_class, avro in _PRIMITIVES.items():
            if isinstance(spark_type, spark_class):
                return avro
        raise ValueError(f"no Avro type for {spark_type.simpleString()}")


def value_schema(value_type: T.StructType) -> dict[str, Any]:
    return _SchemaBuilder().type_of(value_type, "value")


def register_value_schema(
    url: str, properties: dict[str, str], topic: str, schema: dict[str, Any]
) -> int:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url, **properties})
    return client.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))


def serializer(schema_id: int, schema: dict[str, Any]):
    """The `mapInArrow` function turning the `value` struct column into wire-format bytes."""
    prefix = struct.pack(">bI", MAGIC_BYTE, schema_id)

    def serialize(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parsed = fastavro.parse_schema(schema)
        for batch in batches:
            encoded = []
            for value in batch.column("value").to_pylist():
                if value is None:
                    encoded.append(None)
                    continue
                body = io.BytesIO()
                fastavro.schemaless_writer(body, parsed, value)
                encoded.append(prefix + body.getvalue())
            index = batch.schema.get_field_index("value")
            yield batch.set_column(index, "value", pa.array(encoded, pa.binary()))

    return serialize


def as_avro(records: DataFrame, url: str, properties: dict[str, str], topic: str) -> DataFrame:
    """Values as Confluent Avro bytes, their schema registered for `topic`."""
    value_type = records.schema["value"].dataType
    schema = value_schema(value_type)
    schema_id = register_value_schema(url, properties, topic, schema)
    output = T.StructType(
        [
            f if f.name != "value" else T.StructField("value", T.BinaryType())
            for f in records.schema.fields
        ]
    )
    return records.mapInArrow(serializer(schema_id, schema), output)
