"""The requests `StateWire` writes for the JVM's state server are, byte for byte, what pyspark's
own protobuf messages serialize to, for every length a varint of one to three bytes holds; the
values it reads back are what pyspark's own unpickling gives."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pyspark.sql.streaming.proto.StateMessage_pb2 as m
import pytest
from pyspark.serializers import PickleSerializer, write_int
from pyspark.sql import SparkSession

from ops.metrics import ServiceMetrics
from state.spark import pipelined
from state.spark.layouts import BUCKET_STATE
from state.spark.pipelined import BinaryValues, StateWire

SIZES = (1, 100, 126, 127, 128, 16_370, 16_384, 200_000)


class Socket(io.BytesIO):
    """What the wire writes, and a success answer to every request it reads for."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        ok = m.StateResponse(statusCode=0).SerializeToString()
        answers = io.BytesIO()
        for _ in range(64):
            write_int(len(ok), answers)
            answers.write(ok)
        self.answers = io.BytesIO(answers.getvalue())

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.written += data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        return self.answers.read(size)

    def requests(self) -> list[bytes]:
        stream, out = io.BytesIO(bytes(self.written)), []
        while header := stream.read(8):
            out.append(stream.read(int.from_bytes(header[4:], "big")))
        return out


def wire(name: str) -> tuple[StateWire, Socket]:
    socket = Socket()
    client = SimpleNamespace(sockfile=socket, pickleSer=PickleSerializer())
    state = SimpleNamespace(
        _mapStateClient=SimpleNamespace(_stateful_processor_api_client=client), _stateName=name
    )
    return StateWire(state), socket  # type: ignore[arg-type]


def expected(name: str, **call: object) -> bytes:
    """pyspark's own serialization of one map state call."""
    request = m.MapStateCall(stateName=name, **call)
    return m.StateRequest(
        stateVariableRequest=m.StateVariableRequest(mapStateCall=request)
    ).SerializeToString()


@pytest.mark.parametrize("size", SIZES)
def test_puts_removes_and_gets_are_pyspark_s_own_requests(size: int) -> None:
    name = "keys" * (size // 1000 + 1)
    key, value = b"k" * (size // 2), b"v" * size
    state, socket = wire(name)
    state.write_values([(key, value)], [key])
    state.get_values([key])
    pickled_key, pickled_value = (PickleSerializer().dumps((v,)) for v in (key, value))
    assert socket.requests() == [
        expected(name, updateValue=m.UpdateValue(userKey=pickled_key, value=pickled_value)),
        expected(name, removeKey=m.RemoveKey(userKey=pickled_key)),
        expected(name, getValue=m.GetValue(userKey=pickled_key)),
    ]


@pytest.mark.spark
def test_a_value_the_jvm_answers_with_reads_as_pyspark_unpickles_it(spark: SparkSession) -> None:
    """Every byte value, of any length, comes out as pyspark's own unpickling gives it; a row
    of another shape (a NULL field) too, by that unpickling."""
    values = [bytes(range(256)) * 3, b"\x00", b"x" * 127, b"\xff" * 128, bytes(70_000), None]
    rows = spark.createDataFrame([(v,) for v in values], BUCKET_STATE)._jdf.collectAsList()
    to_py = spark._jvm.org.apache.spark.sql.api.python.PythonSQLUtils.toPyRow  # type: ignore[attr-defined]
    pickled = [bytes(to_py(rows.get(i))) for i in range(len(values))]
    loads = PickleSerializer().loads
    read = BinaryValues(loads)
    assert [read(p) for p in reversed(pickled)] == [loads(p)[0] for p in reversed(pickled)]
    assert [read(p) for p in pickled] == values


def test_state_calls_are_pipelined_only_with_the_pyspark_they_were_tested_with(
    spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """The wire speaks pyspark's private protocol: with another pyspark each entry is its own
    call, and the service says so at start and on `/metrics`."""
    assert pipelined.untested_pyspark() is None  # the project pins the tested one
    why = pipelined.untested_pyspark("4.4.0")
    assert why is not None and why.startswith("pyspark 4.4.0 is not the one")
    state = SimpleNamespace(_stateName="keys")  # no pyspark socket client behind it
    pipelined._told.clear()
    with caplog.at_level(logging.WARNING):
        assert pipelined.wire(state) is None and pipelined.wire(state) is None
    assert [r.message for r in caplog.records] == [
        "this state object has no pyspark socket client: one call per state entry"
    ]  # said once
    for gauge, pipelined_calls in ((1.0, True), (0.0, False)):
        metrics = ServiceMetrics(spark.sparkContext, pipelined=pipelined_calls)
        found = metrics.registry.get_sample_value("streamjoin_state_calls_pipelined")
        assert found == gauge
