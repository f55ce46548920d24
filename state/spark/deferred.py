"""State calls whose answer is only a status, written without waiting for it: a bucket's
writes, its engine timer's moves and the switch to the next bucket's key go out together with
the next call that needs an answer (the next bucket's read), in one round trip.

pyspark's client writes each request, flushes, and waits for its answer: a round trip, two
context switches on a busy machine, per call. A bucket's visit made five (the key, the read, the
write, the old timer's delete, the new one's register), and in a live micro-batch of a few
hundred rows those round trips were most of a stateful task's time (`docs/performance.md`).
The JVM's state server answers requests one at a time in the order it reads them
(`state.spark.pipelined`), so a status call's answer can wait: it is read, and its status
checked, just before the answer of the next call that needs one. Every request of pyspark's
own leaves through the client's `_send_proto_message`, which here first reads the answers
still owed; so each call still sees its own answer, and the server still sees the calls in
the order they were made.

A failed deferred call fails the task at that next call. The task's last calls (pyspark closing
the handle) wait for their answers, so every deferred answer is read, and its status checked,
before the task ends and Spark commits its state.

What is installed on pyspark's objects reaches them back only through weak references: a
method of an object stored on that object would make a reference cycle, which only the cyclic
collector frees, and the workers freeze what lives at each task's start out of every collection
(`ops.worker.collector`): a task's API client, still held by the processor when the next task
starts, would never be freed, nor its socket to that task's state server closed.

Like `state.spark.pipelined`, this speaks pyspark's private client, and only with the pyspark
it was tested with; with another, or a handle without a socket client (pyspark's `TwsTester`),
every call waits for its answer as pyspark makes it.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle, ValueState

from state.spark.pipelined import DEFERRED_ANSWERS, answers_of, untested_pyspark, write_request

# Answers are a few bytes each: this many is far below what the sockets' buffers hold, so the
# server never waits to write an answer while we write requests.
MAX_PENDING = 1024

# The client's status-only calls a bucket's visit makes, deferred once installed.
CLIENT_CALLS = ("set_implicit_key", "register_timer", "delete_timer")

Call = TypeVar("Call", bound=Callable[..., Any])


class DeferredAnswers:
    """The answers one API client owes: requests written, answers not yet read."""

    def __init__(self, client: Any) -> None:
        self.file = client.sockfile
        self.receive: Callable[[], tuple[int, str, bytes]] = weak_method(
            client, "_receive_proto_message"
        )
        self.pending = 0
        self.deferring = False
        client._send_proto_message = self.send
        client._receive_proto_message = self.answer
        setattr(client, DEFERRED_ANSWERS, self)

    def defer(self, message: bytes) -> None:
        """Write a request whose answer is read later (`collect`)."""
        write_request(self.file, message)
        self.pending += 1
        if self.pending >= MAX_PENDING:
            self.file.flush()
            self.collect()

    def send(self, message: bytes) -> None:
        """pyspark's `_send_proto_message`: a deferred call's request is only written; any
        other's is written, flushed, and the answers owed before its own are read."""
        if self.deferring:
            self.defer(message)
            return
        write_request(self.file, message)
        self.file.flush()
        self.collect()

    def answer(self) -> tuple[int, str, bytes]:
        """pyspark's `_receive_proto_message`: a deferred call's answer is a success for now
        (its real one is checked by `collect`)."""
        if self.deferring:
            return 0, "", b""
        return self.receive()

    def collect(self) -> None:
        """Read the answers owed (their requests flushed already); fail on a failed one, once
        all are read, so that the stream stays in step."""
        owed, self.pending = self.pending, 0
        failed = None
        for _ in range(owed):
            status, error, _value = self.receive()
            if status != 0 and failed is None:
                failed = error
        if failed is not None:
            raise RuntimeError(f"a state call failed in the state server: {failed}")

    def deferring_call(self, call: Call) -> Call:
        """`call` (one status-only request of pyspark's) made without waiting for its answer."""

        @functools.wraps(call)
        def deferred(*args: Any, **kwargs: Any) -> Any:
            self.deferring = True
            try:
                return call(*args, **kwargs)
            finally:
                self.deferring = False

        return deferred  # type: ignore[return-value]


def weak_method(owner: Any, name: str) -> Callable[..., Any]:
    """`owner`'s method `name` as its class defines it, bound to a weak reference to `owner`:
    stored on `owner`, it keeps `owner` out of a reference cycle."""
    return functools.partial(getattr(type(owner), name), weakref.proxy(owner))


def install(handle: StatefulProcessorHandle) -> bool:
    """Defer the status-only calls of `handle`'s client (the key switch, the timers); whether
    they are."""
    client = getattr(handle, "_statefulProcessorApiClient", None)
    if untested_pyspark() is not None or client is None or not hasattr(client, "sockfile"):
        return False
    if answers_of(client) is None:
        answers = DeferredAnswers(client)
        for name in CLIENT_CALLS:
            setattr(client, name, answers.deferring_call(weak_method(client, name)))
    return True


def writes_deferred(state: ValueState) -> ValueState:
    """`state` with its `update` and `clear` deferred where its client's calls are
    (`install`)."""
    value_client = getattr(state, "_valueStateClient", None)
    answers = answers_of(getattr(value_client, "_stateful_processor_api_client", None))
    if answers is not None:
        state.update = answers.deferring_call(weak_method(state, "update"))  # type: ignore[method-assign]
        state.clear = answers.deferring_call(weak_method(state, "clear"))  # type: ignore[method-assign]
    return state
