"""Avro in the Confluent wire format: magic byte 0, a 4-byte schema id, the Avro body.

Writer schemas are fetched from a Schema Registry by id (confluent-kafka's
`SchemaRegistryClient`) and cached for the life of the decoder, so a registry round trip is
paid once per schema id and Python worker, not per record.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from typing import Any

import fastavro

from serdes.records.formats import DebeziumJsonFormat, DecodedChange, RowBuilder
from serdes.records.schema import Column
from serdes.records.values import DecodeError
from state.changes import RowKind

MAGIC_BYTE = 0


class RegistrySchemas:
    """Parsed writer schemas by id, from the registry at `url` (client made on first use)."""

    def __init__(self, url: str, client_config: dict[str, str] | None = None) -> None:
        self.config = {"url": url, **(client_config or {})}
        self._client = None
        self._parsed: dict[int, Any] = {}

    def parsed(self, schema_id: int) -> Any:
        found = self._parsed.get(schema_id)
        if found is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient
            from confluent_kafka.schema_registry.error import SchemaRegistryError

            if self._client is None:
                self._client = SchemaRegistryClient(self.config)
            try:
                text = self._client.get_schema(schema_id).schema_str
            except SchemaRegistryError as err:
                if err.http_status_code == 404:
                    raise DecodeError("unknown-schema-id", f"schema id {schema_id}") from None
                raise
            found = self._parsed[schema_id] = fastavro.parse_schema(json.loads(text))
        return found


def read_record(value: bytes | None, schemas: RegistrySchemas) -> tuple[dict[str, Any], Any]:
    """The Avro record of a Confluent wire-format value, and its writer schema."""
    if value is None or len(value) < 5 or value[0] != MAGIC_BYTE:
        raise DecodeError("bad-magic-byte", "not the Confluent wire format (magic byte 0)")
    (schema_id,) = struct.unpack(">I", value[1:5])
    schema = schemas.parsed(schema_id)
    try:
        record = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema)
    except Exception as err:  # fastavro raises whatever the bytes make it hit
        raise DecodeError("bad-avro", f"{type(err).__name__}: {err}") from None
    if not isinstance(record, dict):
        raise DecodeError("bad-avro", "the Avro value is not a record")
    return record, schema


def _named_records(avro_type: Any, found: dict[str, dict]) -> dict[str, dict]:
    """Every record type defined anywhere in a schema, by name (later uses refer by name)."""
    if isinstance(avro_type, list):
        for member in avro_type:
            _named_records(member, found)
    elif isinstance(avro_type, dict) and avro_type.get("type") == "record":
        found[avro_type["name"]] = avro_type
        for field in avro_type["fields"]:
            _named_records(field["type"], found)
    return found


def _record_fields(avro_type: Any, named: dict[str, dict]) -> list[dict[str, Any]]:
    """The fields of a record type, looking through a `["null", record]` union and names."""
    for candidate in avro_type if isinstance(avro_type, list) else [avro_type]:
        record = named.get(candidate) if isinstance(candidate, str) else candidate
        if isinstance(record, dict) and record.get("type") == "record":
            return record["fields"]
    return []


def connect_fields(avro_fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Avro fields described as Connect fields (name and `connect.name`), for the converters."""
    described = []
    for field in avro_fields:
        types = field["type"] if isinstance(field["type"], list) else [field["type"]]
        named = next((t for t in types if isinstance(t, dict)), {})
        described.append({"field": field["name"], "name": named.get("connect.name")})
    return described


class AvroConfluentFormat:
    """One Avro record per Kafka record; every record is an insert."""

    def __init__(
        self, columns: Sequence[Column], required: Sequence[str], schemas: RegistrySchemas
    ) -> None:
        self.rows = RowBuilder(columns, required, from_json=False)
        self.schemas = schemas

    def decode(self, key: bytes | None, value: bytes | None) -> list[DecodedChange]:
        record, schema = read_record(value, self.schemas)
        fields = connect_fields(schema.get("fields", []))
        return [(RowKind.INSERT, self.rows.build(record, self.rows.converters(fields)))]


class DebeziumAvroFormat(DebeziumJsonFormat):
    """Debezium's envelope in Avro (Confluent wire format); a null value is a tombstone."""

    def __init__(
        self, columns: Sequence[Column], required: Sequence[str], schemas: RegistrySchemas
    ) -> None:
        super().__init__(columns, required, from_json=False)
        self.schemas = schemas

    def decode(self, key: bytes | None, value: bytes | None) -> list[DecodedChange]:
        if value is None:
            return []
        record, schema = read_record(value, self.schemas)
        named = _named_records(schema, {})
        sides = {f["name"]: _record_fields(f["type"], named) for f in schema.get("fields", [])}
        return self.changes(record, lambda side: connect_fields(sides.get(side, [])))
