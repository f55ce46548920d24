"""How join state is written to Spark's state store: plain data behind a format version.

A checkpoint outlives the code that wrote it, so state holds no pickled Python class (renaming
or moving one would make every checkpoint unreadable): only tuples, lists, dicts, strings,
numbers, bytes, None, and the value types Spark's columns bring (`Decimal`, `date`, `datetime`,
`time`, and the `ZoneInfo` of a timestamp the Row API hands over). Each module turns its own
objects into that plain form and back. The bytes are a format byte then a pickle of the plain
data, or, for a large value read and written whole at every visit, the format byte with its high
bit set, the pickle's length and the pickle packed by zstd (`dump_packed`). C pickle is the
fastest codec Python has for nested builtins (an encoding of its own in Python would cost more
than the join), and a pickle of builtins names no class, so it stays readable whatever the code
becomes. Reading refuses any class but the value types above.

`FORMAT` changes whenever the plain form of any state changes so that this code could not read
the one before; `app.run.checkpoint` records it in the checkpoint and refuses to resume one
written in another format, naming what to do. A new plain form this code tells from the one
before it, and reads both, keeps the format, so that a checkpoint resumes across the change (an
interval join's bucket: four fields with every key's state in it, then five with each key's
state apart; a bucket's value unpacked, then packed; a key's entry with its state pickled in
it, then nested as bytes); a streamjoin from before such a change cannot read what the new one
wrote.
"""

from __future__ import annotations

import io
import pickle
import threading
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

# 1: whole pickled objects (before the checkpoint recorded a format); 2: entry names depended on
# which of a key's values were one object; 3: rows without the time of their last write, entries
# without their expiry
FORMAT = 4
_HEADER = bytes([FORMAT])
# The same plain data, its pickle packed by zstd (`dump_packed`): the format with the high bit
# set, a byte no format's header nor a pickle (format 1) starts with.
_PACKED = FORMAT | 0x80
# A pickle at least this long is packed by `dump_packed`: below it, packing saves too little.
PACK_FROM_BYTES = 4096
_CODEC = pa.Codec("zstd", compression_level=1)
_VALUE_TYPES = {
    ("decimal", "Decimal"),
    ("datetime", "date"),
    ("datetime", "datetime"),
    ("datetime", "time"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("zoneinfo", "ZoneInfo"),
}


def _zone_getattr(owner: Any, name: str) -> Any:
    """What a pickled `ZoneInfo` calls to rebuild itself (`getattr(ZoneInfo, "_unpickle")`),
    and nothing else."""
    if owner is ZoneInfo and name == "_unpickle":
        return ZoneInfo._unpickle  # type: ignore[attr-defined]
    raise StateFormatError(f"state calls {name!r}: not plain data")


class StateFormatError(ValueError):
    """State bytes this code cannot read."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _zone_getattr
        if (module, name) in _VALUE_TYPES:
            return super().find_class(module, name)
        raise StateFormatError(f"state names a class ({module}.{name}): not plain data")


def dump(value: Any) -> bytes:
    """Plain data as stored bytes."""
    return _HEADER + pickle.dumps(value, protocol=5)


def dump_packed(value: Any) -> bytes:
    """Plain data as stored bytes, packed when large: for a value read and written whole at
    every visit (`state.spark.layouts.WholeBuckets`), whose bytes the state server converts
    to and from a pickled string of its own, one character at a time, and RocksDB writes to
    its changelog each micro-batch: packing costs less than moving the bytes it saves
    (`docs/performance.md` has the measures)."""
    pickled = pickle.dumps(value, protocol=5)
    if len(pickled) < PACK_FROM_BYTES:
        return _HEADER + pickled
    size = len(pickled).to_bytes(4, "little")
    return bytes([_PACKED]) + size + _CODEC.compress(pickled, asbytes=True)


def dump_key(key: Any) -> bytes:
    """A key as the name of its state entry: the same bytes for equal keys.

    `dump` memoizes repeated objects, so `("ab", "ab")` pickles one way when both are one
    object and another when they are two: one key would find two entries. The pickler's fast
    mode keeps no memo; it is slower than `dump`, but far cheaper than the state call the key
    is for.
    """
    try:
        out, pickler = _key_pickler.made
    except AttributeError:  # a thread's first key: a pickler of its own, kept (a new one per
        # key was two thirds of a key's cost, paid for every key a batch touches)
        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=5)
        pickler.fast = True
        _key_pickler.made = out, pickler
    out.seek(0)
    out.truncate()
    pickler.dump(key)
    return _HEADER + out.getvalue()


_key_pickler = threading.local()


def dump_entry(expires: int | None, body: bytes) -> bytes:
    """A key's entry (`state.store.keyed_state`): when it expires, and its state's bytes
    (`dump`) nested whole, so that whether the state changed is a comparison of those bytes,
    whatever the entry's expiry, without pickling the state a second time."""
    return dump((expires, body))


def load_entry(blob: bytes) -> tuple[int | None, Any, bytes | None]:
    """A key's entry as its expiry, its state's plain data and that state's bytes (None for an
    entry from before states were nested, `(expires, plain)` pickled whole)."""
    expires, body = load(blob)
    if isinstance(body, bytes):
        return expires, load(body), body
    return expires, body, None


def load(blob: bytes) -> Any:
    """Stored bytes as plain data, packed (`dump_packed`) or not; `StateFormatError` if
    written in another format."""
    if blob and blob[0] == _PACKED:
        size = int.from_bytes(blob[1:5], "little")
        try:
            pickled = _CODEC.decompress(memoryview(blob)[5:], decompressed_size=size, asbytes=True)
        except (OSError, pa.ArrowException) as err:
            raise StateFormatError(f"packed state that does not unpack: {err}") from err
        return _PlainUnpickler(io.BytesIO(pickled)).load()
    if not blob or blob[0] != FORMAT:
        found = blob[0] if blob else None
        raise StateFormatError(f"state format {found!r}, this code reads format {FORMAT}")
    return _PlainUnpickler(io.BytesIO(memoryview(blob)[1:])).load()
