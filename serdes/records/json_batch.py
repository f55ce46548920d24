"""A batch of JSON records read at once by Arrow's JSON reader (C++), where it reads them as
`JsonFormat` or `UpsertJsonFormat` reads them one at a time, and not at all where it might not.

Those formats cost a parse and a loop in Python per record: most of a JSON input's decoding.
Arrow's reader, given the columns' paths as an explicit schema, reads a whole batch in one
call. It must never give another row than the record-by-record path, nor keep a record that path
dead-letters, so `read` gives up (None: the caller decodes the batch record by record) on
anything short of certain:

- a record that is not one object on one line of valid UTF-8 without control characters
  (the reader splits on newlines, and a line that is no object can crash it), or a batch whose
  row count is not its record count;
- anything the reader refuses: a value of another JSON kind than its column's (`"1"` for an
  INT, 1 for a STRING, 1.0 for a BIGINT, which the record-by-record path may read or refuse), a
  whole number beyond 64 bits, a key twice, a lone surrogate, JSON that is not strict;
- a bare `NaN` or `Infinity` (the reader also takes `-NaN` and `Inf`), and in a DOUBLE column
  the whole number `-0` (-0.0 to the reader, 0.0 to Python);
- a missing or null required column, a whole number beyond its column's bits;
- a timestamp other than `yyyy-MM-dd[ T]HH:mm:ss[.f{1,6}]` (an offset, a date alone, epoch
  numbers: the record-by-record path reads them by rules of its own);
- an upsert topic's delete (a null value), or a key that may fail its record or fill its row
  (`_key_matters`).

Columns of other types (DECIMAL, DATE, FLOAT, BYTES), views whose `WHERE` compares with
another literal than a whole number or a string, and upsert keys of several columns are not
read here at all (`of` gives None).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql import types as T

from serdes.records.formats import JsonFormat, UpsertJsonFormat
from state.changes import RowKind

# What Arrow reads a column of each Spark type as: whole numbers as 64 bits (a narrower column
# checks its range after), timestamps as text (checked against `_TIMESTAMP_TEXT`, then cast).
_READ_AS: dict[type, pa.DataType] = {
    T.StringType: pa.string(),
    T.ByteType: pa.int64(),
    T.ShortType: pa.int64(),
    T.IntegerType: pa.int64(),
    T.LongType: pa.int64(),
    T.DoubleType: pa.float64(),
    T.BooleanType: pa.bool_(),
    T.TimestampType: pa.string(),
}
_BITS = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32}
# The timestamps both paths read alike: Python's `fromisoformat` and Arrow's cast, as UTC.
_YEAR = r"(?:[1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9])"  # 0001-9999: Python has no year 0
_TIMESTAMP_TEXT = rf"\A{_YEAR}-\d{{2}}-\d{{2}}[ T]\d{{2}}:\d{{2}}:\d{{2}}(\.\d{{1,6}})?\z"
# A record that may not be one object on one line, or holds a control character (JSON escapes
# them: the record-by-record path refuses it), or a bare token of a number that is not finite
# (the reader takes `-NaN` and `Inf`, which Python's `json` refuses).
_MAY_READ_OTHERWISE = r"[\x00-\x1f]|\A[^{]|[^}]\z|[:,\[]\s*-?[NI]"
# In a DOUBLE column the reader reads the whole number -0 as -0.0, Python's `json` as 0.
_MINUS_ZERO = r"|-0(?:[^.eE0-9]|\z)"
_OPTIONS = pj.ReadOptions(use_threads=False, block_size=1 << 24)

Tree = dict[str, Any]  # a JSON object's fields read: name -> Arrow type, or a nested Tree


def _place(tree: Tree, path: tuple[str, ...], kind: pa.DataType) -> bool:
    """`path` read as `kind` in `tree`; False where the tree reads it otherwise."""
    *steps, leaf = path
    for step in steps:
        tree = tree.setdefault(step, {})
        if not isinstance(tree, dict):
            return False
    return tree.setdefault(leaf, kind) == kind


def _schema(tree: Tree) -> list[pa.Field]:
    return [
        pa.field(name, pa.struct(_schema(kind)) if isinstance(kind, dict) else kind)
        for name, kind in tree.items()
    ]


def _leaves(table: pa.Table, paths: list[tuple[str, ...]]) -> dict[tuple[str, ...], pa.Array]:
    """The values at each of `paths`, null where a step is null: each object read is flattened
    once, for all its fields (`flatten` carries a struct's nulls to its fields)."""
    found: dict[tuple[str, ...], pa.Array] = {}

    def at(path: tuple[str, ...]) -> pa.Array:
        if path not in found:
            if len(path) == 1:
                found[path] = table.column(path[0]).combine_chunks()
            else:
                parent = at(path[:-1])
                for field, child in zip(parent.type, parent.flatten(), strict=True):
                    found[(*path[:-1], field.name)] = child
        return found[path]

    return {path: at(path) for path in paths}


class JsonBatchReader:
    """`JsonFormat`'s or `UpsertJsonFormat`'s records, a batch at a time (see the module)."""

    def __init__(self, fmt: JsonFormat | UpsertJsonFormat, row_type: pa.StructType) -> None:
        paths = dict(getattr(fmt, "paths", ()))
        self.columns = [
            (paths.get(name, (name,)), type(spark), row_type.field(i).type)
            for i, (name, spark) in enumerate((c.name, c.spark_type) for c in fmt.rows.columns)
        ]
        self.required = [paths.get(name, (name,)) for name in fmt.rows.required]
        self.where = [((field,), kept) for field, kept, _read in getattr(fmt, "where", ())]
        self.row_type = row_type
        # an upsert record's row is its value; its key only fails it (`_key_matters`)
        self.upsert = isinstance(fmt, UpsertJsonFormat)
        self.op = RowKind.UPDATE_AFTER if self.upsert else RowKind.INSERT
        self.tree: Tree = {}
        doubles = any(spark is T.DoubleType for _path, spark, _arrow in self.columns)
        self.may_read_otherwise = _MAY_READ_OTHERWISE + (_MINUS_ZERO if doubles else "")
        self.parse = pj.ParseOptions()  # the explicit schema of `tree`, once `of` built it

    @classmethod
    def of(
        cls, fmt: JsonFormat | UpsertJsonFormat, row_type: pa.StructType
    ) -> JsonBatchReader | None:
        """The reader of `fmt`'s records as rows of `row_type`; None where a column's type, a
        literal of the view's `WHERE` or an upsert key of several columns is not one it
        reads."""
        if isinstance(fmt, UpsertJsonFormat) and len(fmt.key_columns) != 1:
            return None  # the key is a JSON object, whose fields may fill the row's
        reader = cls(fmt, row_type)
        for path, spark, _arrow in reader.columns:
            kind = _READ_AS.get(spark)
            if kind is None or not _place(reader.tree, path, kind):
                return None
        for path, kept in reader.where:
            if isinstance(kept, bool) or not isinstance(kept, int | str):
                return None
            if not _place(reader.tree, path, pa.int64() if isinstance(kept, int) else pa.string()):
                return None
        reader.parse = pj.ParseOptions(
            explicit_schema=pa.schema(_schema(reader.tree)), unexpected_field_behavior="ignore"
        )
        return reader

    def read(self, values: pa.Array, keys: pa.Array) -> tuple[pa.Array, pa.StructArray] | None:
        """The indices of the records the view keeps and their rows; None where the batch must
        be read record by record."""
        if values.null_count:  # a delete, or no value to read
            return None
        if self.upsert and _key_matters(keys):
            return None
        if pc.any(pc.match_substring_regex(values, self.may_read_otherwise)).as_py():
            return None
        try:
            values.cast(pa.string())  # valid UTF-8
            lines = pc.binary_join(pa.ListArray.from_arrays([0, len(values)], values), b"\n")
            table = pj.read_json(pa.BufferReader(lines[0].as_buffer()), _OPTIONS, self.parse)
            if table.num_rows != len(values):
                return None
            return self._rows(table)
        except pa.ArrowInvalid:  # a record the reader refuses, a timestamp no calendar has
            return None

    def _rows(self, table: pa.Table) -> tuple[pa.Array, pa.StructArray] | None:
        kept = pa.array(range(table.num_rows), pa.int64())
        if self.where:
            mask, fields = None, _leaves(table, [path for path, _literal in self.where])
            for path, literal in self.where:
                equal = pc.fill_null(pc.equal(fields[path], literal), False)
                mask = equal if mask is None else pc.and_(mask, equal)
            kept, table = pc.indices_nonzero(mask), table.filter(mask)
        leaves = _leaves(table, [path for path, _spark, _arrow in self.columns] + self.required)
        if any(leaves[path].null_count for path in self.required):
            return None
        children = []
        for path, spark, arrow in self.columns:
            found = leaves[path]
            if spark in _BITS and not _fits(found, _BITS[spark]):
                return None
            if spark is T.TimestampType:
                if pc.all(pc.match_substring_regex(found, _TIMESTAMP_TEXT)).as_py() is False:
                    return None
                found = found.cast(pa.timestamp("us"))
            children.append(found.cast(arrow))
        return kept, pa.StructArray.from_arrays(children, fields=list(self.row_type))


def _key_matters(keys: pa.Array) -> bool:
    """Whether an upsert key of one column may give its record another row than the value's,
    or fail it: a missing key, a JSON object (its fields fill those the value lacks), a key
    that is not UTF-8 text. Any other key is a value of the key column, which the value holds
    too (it is required) and which overrides the key's."""
    if keys.null_count or pc.any(pc.match_substring(keys, b"{")).as_py():
        return True
    try:
        keys.cast(pa.string())
    except pa.ArrowInvalid:
        return True
    return False


def _fits(values: pa.Array, bits: int) -> bool:
    """Whether every whole number of `values` fits `bits` (as the record-by-record path checks)."""
    low, high = pc.min_max(values).values()
    limit = 1 << (bits - 1)
    return low.as_py() is None or (-limit <= low.as_py() and high.as_py() < limit)
