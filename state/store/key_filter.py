"""Which keys a bucket may hold: a key it never held costs no state call.

Loading a table into a join is mostly keys the state has never seen, and reading each before
writing it is a state call answered "absent": half the calls of a load. A Bloom filter of the
names a bucket's entries were ever written under answers "certainly absent" for almost all of
them without asking the store; "maybe" still asks. It must never miss a name written since it
was started, so it is started only on an empty bucket (a bucket's older entries are not in it)
and every name written is added before the batch commits; names removed stay in it, costing
only a call that finds nothing.

It grows by layers, each twice the last, as keys come (a scalable Bloom filter): a bucket of a
few keys keeps a few hundred bytes. Past `MAX_KEYS` it is dropped and the bucket asks for every
key as before: the filter lives in the bucket's own value, read at every visit, so its size is
bounded, and so is the extra false-positive share of many layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

import numpy as np

BITS_PER_KEY = 12
HASHES = 8  # with 12 bits a key: ~0.3 % false positives per full layer
FIRST_CAPACITY = 1024
LAYERS = 7  # capacities 1024 .. 65536 keys
MAX_KEYS = FIRST_CAPACITY * (2**LAYERS - 1)

Layer = tuple[int, int, bytes]  # capacity, keys added, bits (plain form)

# Names asked or added together from this many on go through numpy, a layer at a time; below,
# one by one (numpy's set-up per call costs more than a few names' loops). Both set and test
# the same bits.
TOGETHER_FROM = 64


def name_hash(name: bytes) -> int:
    """64 bits of an entry's name, the same in every process."""
    return int.from_bytes(blake2b(name, digest_size=8).digest(), "little")


def _halves(hashed: int) -> tuple[int, int]:
    """The two hashes of double hashing: position i of a layer is `low + i * high` mod its bits."""
    return hashed & 0xFFFFFFFF, (hashed >> 32) | 1


def _hashes(names: Sequence[bytes]) -> np.ndarray:
    """`name_hash` of each name, as unsigned 64-bit integers."""
    digests = b"".join(blake2b(name, digest_size=8).digest() for name in names)
    return np.frombuffer(digests, dtype="<u8")


def _positions(hashes: np.ndarray, capacity: int) -> np.ndarray:
    """Each name's `HASHES` bit positions in a layer of `capacity` (a row per name), as the
    loops of `might_hold` and `add` step through them (all below 2**36: no overflow)."""
    low, high = hashes & np.uint64(0xFFFFFFFF), (hashes >> np.uint64(32)) | np.uint64(1)
    steps = np.arange(HASHES, dtype=np.uint64)
    return (low[:, None] + steps[None, :] * high[:, None]) % np.uint64(capacity * BITS_PER_KEY)


class KeyFilter:
    """The names a bucket's entries were written under since it was empty, as a Bloom filter."""

    def __init__(self, layers: list[tuple[int, int, bytearray]] | None = None) -> None:
        self.layers = layers or []

    @classmethod
    def from_plain(cls, plain: list[Layer]) -> KeyFilter:
        return cls([(capacity, count, bytearray(bits)) for capacity, count, bits in plain])

    def to_plain(self) -> list[Layer]:
        return [(capacity, count, bytes(bits)) for capacity, count, bits in self.layers]

    def might_hold(self, name: bytes) -> bool:
        """False: no entry was ever written under `name` since the filter started."""
        low, high = _halves(name_hash(name))
        for capacity, _count, bits in reversed(self.layers):  # the largest holds the most
            size, position = capacity * BITS_PER_KEY, low
            for _ in range(HASHES):  # a name never added fails after ~2 bits of a full layer
                bit = position % size
                if not bits[bit >> 3] >> (bit & 7) & 1:
                    break
                position += high
            else:
                return True
        return False

    def _room(self) -> bool:
        """Whether the last layer can take a name, a new layer added where it is full; False
        once the last possible layer is full."""
        if not self.layers or self.layers[-1][1] >= self.layers[-1][0]:
            if len(self.layers) == LAYERS:
                return False
            capacity = FIRST_CAPACITY << len(self.layers)
            self.layers.append((capacity, 0, bytearray(capacity * BITS_PER_KEY // 8)))
        return True

    def might_hold_each(self, names: Sequence[bytes]) -> list[bool]:
        """`might_hold` of each name."""
        if len(names) < TOGETHER_FROM:
            return [self.might_hold(name) for name in names]
        hashes, held = _hashes(names), np.zeros(len(names), dtype=bool)
        for capacity, _count, bits in self.layers:
            positions = _positions(hashes, capacity)
            layer = np.frombuffer(bits, dtype=np.uint8)
            held |= ((layer[positions >> np.uint64(3)] >> (positions & np.uint64(7))) & 1).all(1)
        return held.tolist()

    def add_all(self, names: Sequence[bytes]) -> bool:
        """`add` each name, in order; False once the filter is full (the names after it are
        not in it: it must be dropped)."""
        if len(names) < TOGETHER_FROM:
            return all(self.add(name) for name in names)
        hashes, start = _hashes(names), 0
        while start < len(names):
            if not self._room():
                return False
            capacity, count, bits = self.layers[-1]
            taken = min(capacity - count, len(names) - start)
            positions = _positions(hashes[start : start + taken], capacity).ravel()
            masks = np.left_shift(np.uint8(1), (positions & np.uint64(7)).astype(np.uint8))
            np.bitwise_or.at(np.frombuffer(bits, dtype=np.uint8), positions >> np.uint64(3), masks)
            self.layers[-1] = (capacity, count + taken, bits)
            start += taken
        return True

    def add(self, name: bytes) -> bool:
        """Take `name` in; False when the filter is full (`MAX_KEYS`) and must be dropped."""
        if not self._room():
            return False
        capacity, count, bits = self.layers[-1]
        size, (position, high) = capacity * BITS_PER_KEY, _halves(name_hash(name))
        for _ in range(HASHES):
            bit = position % size
            bits[bit >> 3] |= 1 << (bit & 7)
            position += high
        self.layers[-1] = (capacity, count + 1, bits)
        return True
