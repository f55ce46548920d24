"""Many `MapState` calls in one round trip: requests written back to back, then their answers.

Each call of pyspark's state API writes one request to the JVM's state server, flushes, and
waits for its answer: a round trip, two context switches on a busy machine, per entry read or
written. The server answers requests in the order it reads them, one at a time, from a
buffered stream (`TransformWithStateInPySparkStateServer`), so a client may write many before
reading any answer: the same messages, the same state, the same order, without the waits
(`docs/performance.md` has what it saves).

This speaks pyspark's own wire format (`StateMessage.proto`, entries pickled as the API
pickles them) through the API client's socket, which pyspark does not make public: it holds
for the pyspark the project pins, and a state object without that client (`TwsTester`'s, in
tests) is called one entry at a time.

No deadlock: a chunk's requests are written only up to `CHUNK_BYTES` before its answers are
read, well under what the socket's buffers hold, so writing never waits on a server that
waits on us to read; the answers may be any size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pyspark.serializers import read_int, write_int
from pyspark.sql.streaming.stateful_processor import MapState

CHUNK_BYTES = 32 * 1024


class StateWire:
    """The socket and serializers of the API client behind a `MapState` of bytes -> bytes."""

    def __init__(self, state: MapState) -> None:
        import pyspark.sql.streaming.proto.StateMessage_pb2 as messages

        client = state._mapStateClient._stateful_processor_api_client  # type: ignore[attr-defined]
        self.messages = messages
        self.name: str = state._stateName  # type: ignore[attr-defined]
        self.file = client.sockfile
        self.dumps: Callable[[Any], bytes] = client.pickleSer.dumps
        self.loads: Callable[[bytes], Any] = client.pickleSer.loads

    def request(self, **call: Any) -> bytes:
        m = self.messages
        map_call = m.MapStateCall(stateName=self.name, **call)
        return m.StateRequest(
            stateVariableRequest=m.StateVariableRequest(mapStateCall=map_call)
        ).SerializeToString()

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
        get, dumps, loads = self.messages.GetValue, self.dumps, self.loads
        answers = self.exchange(self.request(getValue=get(userKey=dumps((k,)))) for k in keys)
        return [loads(value)[0] if value else None for value in answers]

    def write_values(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None:
        """Put `puts`, then remove `removes`."""
        m, dumps = self.messages, self.dumps
        requests = [
            self.request(updateValue=m.UpdateValue(userKey=dumps((k,)), value=dumps((v,))))
            for k, v in puts
        ]
        requests += [self.request(removeKey=m.RemoveKey(userKey=dumps((k,)))) for k in removes]
        self.exchange(requests)

    def exchange(self, requests: Iterable[bytes]) -> list[bytes]:
        """Every request's answer value, the requests written a chunk at a time."""
        values: list[bytes] = []
        pending = size = 0
        for message in requests:
            write_int(0, self.file)  # the message format's version, as pyspark writes it
            write_int(len(message), self.file)
            self.file.write(message)
            pending += 1
            size += len(message) + 8
            if size >= CHUNK_BYTES:
                self.file.flush()
                values += self.answers(pending)
                pending = size = 0
        if pending:
            self.file.flush()
            values += self.answers(pending)
        return values


def wire(state: MapState) -> StateWire | None:
    """The wire behind `state`, or None when it is not pyspark's socket client."""
    try:
        return StateWire(state)
    except AttributeError:
        return None
