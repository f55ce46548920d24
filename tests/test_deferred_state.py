"""A bucket's status-only state calls (the key switch, the write, the timer's move) wait for no
answer of their own: pyspark's own client, against a state server that answers in order as the
JVM's does, makes one round trip per bucket where it made five, leaves the same state, and a
call that failed fails the task at the next call; a task's client is freed when the task
lets it go, without the cyclic collector, and a closed task's processor lets it go."""

from __future__ import annotations

import gc
import weakref

import pyspark.sql.streaming.proto.StateMessage_pb2 as m
import pytest
from pyspark.serializers import PickleSerializer
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle, ValueState
from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorApiClient
from pyspark.sql.streaming.tws_tester import TwsTester
from pyspark.sql.streaming.value_state_client import ValueStateClient
from pyspark.sql.types import IntegerType, StructField, StructType

from state.spark import deferred
from state.spark.layouts import BUCKET_STATE
from tests.frames import join_frame
from tests.test_regular_processor import KINDS, SPEC, changes

KEY = StructType([StructField("bucket", IntegerType())])


class StateServer:
    """The client's socket file, with a state server behind it that reads requests in the
    order written and answers each, as the JVM's does; a round trip is a flush that sent
    requests. `failing`: the server fails every value write."""

    def __init__(self, failing: bool = False) -> None:
        self.unread, self.answers, self.at = bytearray(), bytearray(), 0
        self.round_trips = 0
        self.failing = failing
        self.key: bytes | None = None
        self.values: dict[bytes, bytes] = {}
        self.timers: set[tuple[bytes, int]] = set()

    def write(self, data: bytes) -> int:
        self.unread += data
        return len(data)

    def flush(self) -> None:
        if not self.unread:
            return
        self.round_trips += 1
        while self.unread:
            size = int.from_bytes(self.unread[4:8], "big")
            request = m.StateRequest.FromString(bytes(self.unread[8 : 8 + size]))
            del self.unread[: 8 + size]
            answer = self.answer(request).SerializeToString()
            self.answers += len(answer).to_bytes(4, "big") + answer

    def read(self, size: int) -> bytes:
        assert self.at + size <= len(self.answers), "a read of an answer never asked for"
        self.at += size
        return bytes(self.answers[self.at - size : self.at])

    def answer(self, request: m.StateRequest) -> m.StateResponse:
        if request.HasField("implicitGroupingKeyRequest"):
            self.key = request.implicitGroupingKeyRequest.setImplicitKey.key or None
            return m.StateResponse(statusCode=0)
        assert self.key is not None
        if request.HasField("statefulProcessorCall"):
            timer = request.statefulProcessorCall.timerStateCall
            if timer.HasField("register"):
                self.timers.add((self.key, timer.register.expiryTimestampMs))
            else:
                self.timers.discard((self.key, timer.delete.expiryTimestampMs))
            return m.StateResponse(statusCode=0)
        call = request.stateVariableRequest.valueStateCall
        if call.HasField("get"):
            return m.StateResponse(statusCode=0, value=self.values.get(self.key, b""))
        if self.failing:
            return m.StateResponse(statusCode=1, errorMessage="the store is gone")
        if call.HasField("valueStateUpdate"):
            self.values[self.key] = call.valueStateUpdate.value
        else:
            self.values.pop(self.key, None)
        return m.StateResponse(statusCode=0)


def client(server: StateServer) -> StatefulProcessorApiClient:
    """pyspark's own client, on `server` instead of the JVM's socket."""
    made = StatefulProcessorApiClient.__new__(StatefulProcessorApiClient)
    made.key_schema, made.sockfile, made.pickleSer = KEY, server, PickleSerializer()
    return made


def visits(made: StatefulProcessorApiClient, defer: bool) -> list[tuple | None]:
    """A task's visits of four buckets as the frame makes them: the key, the bucket read,
    written back, its engine timer moved; then the task's end (pyspark's next call)."""
    handle = StatefulProcessorHandle(made)
    if defer:
        assert deferred.install(handle)
    state = ValueState(ValueStateClient(made, BUCKET_STATE), "bucket")
    state = deferred.writes_deferred(state) if defer else state
    read = []
    for visit in range(2):
        for bucket in range(4):
            made.set_implicit_key((bucket,))
            read.append(state.get())
            if bucket == 3 and visit == 1:
                state.clear()
            else:
                state.update((b"visit %d of %d" % (visit, bucket),))
            if visit:
                handle.deleteTimer(1000 + bucket)
            handle.registerTimer(1000 * (visit + 1) + bucket)
    made.remove_implicit_key()
    return read


def test_a_buckets_visit_is_one_round_trip_and_leaves_the_state_pyspark_s_calls_leave() -> None:
    waiting, deferring = StateServer(), StateServer()
    read_waiting = visits(client(waiting), defer=False)
    read_deferring = visits(client(deferring), defer=True)
    assert (
        read_deferring == read_waiting == [None] * 4 + [(b"visit 0 of %d" % b,) for b in range(4)]
    )
    assert deferring.values == waiting.values and len(waiting.values) == 3
    assert deferring.timers == waiting.timers and len(waiting.timers) == 4
    assert waiting.round_trips == 8 * 5 - 4 + 1  # the first visits delete no timer
    assert deferring.round_trips == 8 + 1  # each bucket's read, then the task's end
    assert deferring.at == len(deferring.answers)  # every answer read: the stream in step


def test_a_deferred_write_that_failed_fails_the_next_call() -> None:
    server = StateServer(failing=True)
    made = client(server)
    assert deferred.install(StatefulProcessorHandle(made))
    state = deferred.writes_deferred(ValueState(ValueStateClient(made, BUCKET_STATE), "bucket"))
    made.set_implicit_key((1,))
    state.update((b"lost",))  # no answer waited for
    with pytest.raises(RuntimeError, match="the store is gone"):
        made.remove_implicit_key()


def test_a_finished_tasks_client_and_state_are_freed_by_reference_counting_alone() -> None:
    """The workers freeze what lives at each task's start out of every collection
    (`ops.worker.collector`): a task's client held in a reference cycle, and its socket to that
    task's state server, would stay for the worker's life, one more every task."""
    made = client(StateServer())
    handle = StatefulProcessorHandle(made)
    assert deferred.install(handle)
    state = deferred.writes_deferred(ValueState(ValueStateClient(made, BUCKET_STATE), "bucket"))
    made.set_implicit_key((1,))
    state.update((b"written",))
    handle.registerTimer(1000)
    made.remove_implicit_key()
    freed = [weakref.ref(made), weakref.ref(state)]
    gc.disable()
    try:
        del made, handle, state
        assert [ref() for ref in freed] == [None, None]
    finally:
        gc.enable()


def test_a_closed_tasks_processor_holds_none_of_its_state() -> None:
    """A worker's processor lives on after its task (pyspark holds it until the next task's
    `init`), and what it holds then is frozen out of every collection at that start: any
    cycle among the state objects the task made, pyspark's own included, would stay for the
    worker's life. Once closed, the task's store is the collector's to free."""
    frame = join_frame(SPEC, KINDS)
    tester = TwsTester(frame)
    tester.testInPandas(0, changes((1, "+I", 1, ("p1", 10)), (0, "+I", 2, ("o1", "p1", 1))))
    store = weakref.ref(frame.store)
    frame.close()
    del tester
    gc.collect()
    assert store() is None
