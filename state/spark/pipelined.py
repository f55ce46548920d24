"""Many `MapState` calls in one round trip: requests written back to back, then their answers.

Each call of pyspark's state API writes one request to the JVM's state server, flushes, and
waits for its answer: a round trip, two context switches on a busy machine, per entry read or
written. The server answers requests in the order it reads them, one at a time, from a
buffered stream (`TransformWithStateInPySparkStateServer`), so a client may write many before
reading any answer: the same messages, the same state, the same order, without the waits
(`docs/performance.md` has what it saves).

This speaks pyspark's own wire format (`StateMessage.proto`, entries pickled as the API
pickles them) through the API client's socket, which pyspark does not make public: it is used
only with the pyspark it was tested with (`TESTED_PYSPARK`); with another, and for a state
object without that client (`TwsTester`'s, in tests), entries are read and written one call
each, said once in each worker's log (the service says it at start and on `/metrics`:
`streamjoin_state_calls_pipelined`).

No deadlock: a chunk's requests are written only up to `CHUNK_BYTES` before its answers are
read, well under what the socket's buffers hold, so writing never waits on a server that
waits on us to read; the answers may be any size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import pyspark
from pyspark.serializers import read_int, write_int
from pyspark.sql.streaming.stateful_processor import MapState

CHUNK_BYTES = 32 * 1024
# The pyspark whose private state protocol this module was tested against
# (`tests/test_state_wire.py` holds the tags below to its messages).
TESTED_PYSPARK = "4.3.0"

# The API client attribute where `state.spark.deferred` keeps the answers the client owes.
DEFERRED_ANSWERS = "deferred_answers"

log = logging.getLogger(__name__)
_told: list[str] = []  # the fallback, said once in a worker's log

# The tags (field number << 3 | 2, a length-delimited field) of the `StateMessage.proto` fields
# a request is made of; `tests/test_state_wire.py` holds them to pyspark's own messages.
_STATE_VARIABLE_REQUEST = b"\x1a"  # StateRequest.stateVariableRequest = 3
_MAP_STATE_CALL = b"\x1a"  # StateVariableRequest.mapStateCall = 3
_STATE_NAME = b"\x0a"  # MapStateCall.stateName = 1
_GET_VALUE = b"\x1a"  # MapStateCall.getValue = 3
_UPDATE_VALUE = b"\x2a"  # MapStateCall.updateValue = 5
_REMOVE_KEY = b"\x4a"  # MapStateCall.removeKey = 9
_USER_KEY = b"\x0a"  # GetValue / UpdateValue / RemoveKey.userKey = 1
_VALUE = b"\x12"  # UpdateValue.value = 2


# How the JVM's state server pickles a value of one BINARY field (Pyrolite, as pyspark's
# `toPyRow` does): the row's converter and its schema as JSON, then the bytes as the text of their
# Latin-1 characters (`bytes(bytearray(text, "latin-1"))`), UTF-8 on the wire, then a fixed end.
_BYTES_TEXT = b"(cbuiltins\nbytes\nc__builtin__\nbytearray\nX"
_BYTES_END = b"q\x03X\x07\x00\x00\x00latin-1q\x04\x86Rq\x05\x85Rq\x06tRq\x07."


class BinaryValues:
    """The BINARY field of the one-field rows the JVM answers with, read straight from the
    pickle where it has the shape above, else by unpickling as pyspark does: that builds a
    `Row` and parses its schema's JSON for every value, several times the cost of the
    bytes' own decoding (`docs/performance.md`). The head before the text (the schema's JSON
    included) is taken from the first value and must then match byte for byte."""

    def __init__(self, loads: Callable[[bytes], Any]) -> None:
        self.loads = loads
        self.head: bytes | None = None

    def __call__(self, pickled: bytes) -> bytes:
        if self.head is None and (at := pickled.find(_BYTES_TEXT)) >= 0:
            self.head = pickled[: at + len(_BYTES_TEXT)]
        if self.head is not None and pickled.startswith(self.head):
            start = len(self.head) + 4
            end = start + int.from_bytes(pickled[start - 4 : start], "little")
            if pickled[end:] == _BYTES_END:
                return pickled[start:end].decode("utf-8", "surrogatepass").encode("latin-1")
        return self.loads(pickled)[0]


def write_request(file: Any, message: bytes) -> None:
    """Write one request as pyspark frames it: the message format's version, the message's
    length, the message."""
    write_int(0, file)
    write_int(len(message), file)
    file.write(message)


def answers_of(client: Any) -> Any:
    """The answers an API client owes for the calls it deferred (`state.spark.deferred`),
    None when its calls wait for their answers."""
    return getattr(client, DEFERRED_ANSWERS, None)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited protobuf field: its tag, the payload's length as a varint, the payload."""
    size, varint = len(payload), bytearray()
    while size > 0x7F:
        varint.append(size & 0x7F | 0x80)
        size >>= 7
    varint.append(size)
    return tag + varint + payload


class StateWire:
    """The socket and serializers of the API client behind a `MapState` of bytes -> bytes."""

    def __init__(self, state: MapState) -> None:
        import pyspark.sql.streaming.proto.StateMessage_pb2 as messages

        client = state._mapStateClient._stateful_processor_api_client  # type: ignore[attr-defined]
        self.messages = messages
        self.name: str = state._stateName  # type: ignore[attr-defined]
        self.file = client.sockfile
        self.dumps: Callable[[Any], bytes] = client.pickleSer.dumps
        self.value = BinaryValues(client.pickleSer.loads)
        self.state_name = _field(_STATE_NAME, self.name.encode())
        self.client = client  # its answers owed, if it defers some (`state.spark.deferred`)

    def request(self, call: bytes, *fields: bytes) -> bytes:
        """A `StateRequest` for one call (`_GET_VALUE`, ...) of this map state with the call's
        encoded `fields`: what `StateRequest(stateVariableRequest=StateVariableRequest(
        mapStateCall=MapStateCall(stateName=..., call=...))).SerializeToString()` gives, written
        directly: building the message objects is a worker's cost per entry
        (`docs/performance.md`)."""
        map_call = self.state_name + _field(call, b"".join(fields))
        return _field(_STATE_VARIABLE_REQUEST, _field(_MAP_STATE_CALL, map_call))

    def answers(self, count: int) -> list[bytes]:
        """The values of the next `count` answers, in order."""
        values, failed = [], None
        for _ in range(count):
            answer = self.messages.StateResponse()
            answer.ParseFromString(self.file.read(read_int(self.file)))
            if answer.statusCode != 0 and failed is None:
                failed = answer.errorMessage
            values.append(answer.value)
        if failed is not None:  # read every answer first: the stream stays in step
            raise RuntimeError(f"state call failed in the state server: {failed}")
        return values

    def get_values(self, keys: list[bytes]) -> list[bytes | None]:
        """The values at `keys` (None: absent)."""
        dumps, value_of = self.dumps, self.value
        answers = self.exchange(
            self.request(_GET_VALUE, _field(_USER_KEY, dumps((k,)))) for k in keys
        )
        return [value_of(value) if value else None for value in answers]

    def write_values(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None:
        """Put `puts`, then remove `removes`: without waiting for the answers where the client
        defers status calls (`state.spark.deferred`)."""
        dumps, request = self.dumps, self.request
        requests = [
            request(_UPDATE_VALUE, _field(_USER_KEY, dumps((k,))), _field(_VALUE, dumps((v,))))
            for k, v in puts
        ]
        requests += [request(_REMOVE_KEY, _field(_USER_KEY, dumps((k,)))) for k in removes]
        owed = answers_of(self.client)
        if owed is None:
            self.exchange(requests)
        else:
            for message in requests:
                owed.defer(message)

    def exchange(self, requests: Iterable[bytes]) -> list[bytes]:
        """Every request's answer value, the requests written a chunk at a time (after the
        answers the client owes, `state.spark.deferred`)."""
        owed = answers_of(self.client)
        values: list[bytes] = []
        pending = size = 0
        for message in requests:
            write_request(self.file, message)
            pending += 1
            size += len(message) + 8
            if size >= CHUNK_BYTES:
                self.file.flush()
                if owed is not None:
                    owed.collect()
                values += self.answers(pending)
                pending = size = 0
        if pending:
            self.file.flush()
            if owed is not None:
                owed.collect()
            values += self.answers(pending)
        return values


def untested_pyspark(version: str = pyspark.__version__) -> str | None:
    """Why state calls are not pipelined with this pyspark (None: they are)."""
    if version == TESTED_PYSPARK:
        return None
    return (
        f"pyspark {version} is not the one the pipelined state calls were tested with "
        f"({TESTED_PYSPARK}): each state entry is read and written with a call of its own, "
        "several times slower on large state"
    )


def wire(state: MapState) -> StateWire | None:
    """The wire behind `state`, or None when it is not pyspark's socket client, or not the
    pyspark it was tested with."""
    why = untested_pyspark()
    if why is None:
        try:
            return StateWire(state)
        except AttributeError:
            why = "this state object has no pyspark socket client: one call per state entry"
    if not _told:
        _told.append(why)
        log.warning("%s", why)
    return None
