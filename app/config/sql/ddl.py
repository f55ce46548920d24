"""The tables of a Flink SQL script (`app.config.sql.query`): its statements, each `CREATE TABLE`
read (columns, keys, watermarks, computed and metadata columns, options) and its connector
options turned into the variables of an input, the output or a lookup table.

Only what streamjoin runs is read; any other option is refused naming it and the table's line,
and a secret (`'password'`, `'properties.sasl.jaas.config'`, …) is refused with the variable to
give it in instead: the script sits in a ConfigMap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.config.parsers import DURATION, OTHER_PARTITIONS, duration_ms
from app.config.redaction import is_secret
from app.config.registry import INPUT_FORMATS, OUTPUT_FORMATS, VARIABLES, flink_options
from serdes.kafka.decode import METADATA_TYPES
from serdes.records.schema import SchemaError, parse_schema
from state.expr.functions import INTERVAL_UNIT_MS

_NAME = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_$]*)"
# Flink's format names are the service's (`upsert` is a connector in Flink, not a format)
_FORMATS = [name for name in INPUT_FORMATS if name != "upsert"]
_STARTUP = {
    "earliest-offset": "earliest",
    "latest-offset": "latest",
    "group-offsets": "group-offsets",
}
# The startup modes that take an option of their own, and its name
_STARTUP_WITH = {
    "specific-offsets": "scan.startup.specific-offsets",
    "timestamp": "scan.startup.timestamp-millis",
}
_SPECIFIC_OFFSETS = "partition:0,offset:42;partition:1,offset:300"
# Options of Flink's connectors that change nothing here (offsets live in the checkpoint).
# Options whose only value streamjoin runs is Flink's default: any other is refused
_DEFAULT_ONLY = {"value.fields-include": "ALL", "sink.partitioner": "default"}
# Flink's query hints (`/*+ NAME(…) */`) streamjoin runs; any other is refused, never dropped
HINTS = ("EARLY_FIRE", "LOOKUP", "MULTI_JOIN", "STATE_TTL")


class SqlError(ValueError):
    """A statement streamjoin cannot run; the message starts with its line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")


@dataclass
class Table:
    """One CREATE TABLE: its columns as declared and its connector options."""

    name: str
    line: int
    physical: list[tuple[str, str]] = field(default_factory=list)  # (name, Flink type)
    not_null: set[str] = field(default_factory=set)
    metadata: dict[str, str] = field(default_factory=dict)  # column -> metadata key
    proctime: str | None = None  # a `name AS PROCTIME()` column
    # `t AS TO_TIMESTAMP_LTZ(ms, 3)`, `t AS CAST(s AS TIMESTAMP(3))`: t -> (ms, its new type)
    converted: dict[str, tuple[str, str]] = field(default_factory=dict)
    watermark: tuple[str, int] | None = None  # (rowtime column, delay ms)
    primary_key: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    declared: list[str] = field(default_factory=list)  # every column's name, in order
    # a `ROW<…>` column's fields: column -> [(field, Flink type)]; read only through a view
    rows: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    cases: dict[str, str] = field(default_factory=dict)  # a `c AS CASE … END` column's CASE
    # a view's (`app.config.sql.views`): its columns read from nested fields of the records
    # (column -> dotted path), and the records it keeps (top-level field -> JSON value)
    paths: dict[str, str] = field(default_factory=dict)
    where: dict[str, object] = field(default_factory=dict)

    def columns(self) -> list[str]:
        """Every column a query can name, in declared order: not the proctime one (it has no
        value here), nor the column a TO_TIMESTAMP_LTZ column reads (it becomes that one)."""
        hidden = {self.proctime, *(source for source, _ in self.converted.values())}
        return [name for name in self.declared if name not in hidden]

    def stored(self, column: str) -> str:
        """The column of the records a query's column is: `t AS TO_TIMESTAMP_LTZ(ms, 3)` is ms."""
        return self.converted[column][0] if column in self.converted else column


@dataclass
class Compiled:
    """The variables the script stands for, and the line each was set by."""

    variables: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    # each input topic's startup mode, as STARTING_OFFSETS spells it, and the line of its table
    starts: dict[str, tuple[str | dict, int]] = field(default_factory=dict)
    # a chain's joins after the first, each as a join of two would be configured: its table's
    # RIGHT_* variables and its JOIN_TYPE, JOIN_KIND, JOIN_ON
    chain: list[Compiled] = field(default_factory=list)
    # where the script asks for Flink's multi-way join (its option or its hint), if it does
    multi_way: str | None = None

    def set(self, name: str, value: str, line: int) -> None:
        if name in self.variables and self.variables[name] != value:
            raise SqlError(
                line,
                f"{name} would be {value!r} here but {self.variables[name]!r} "
                f"from line {self.lines[name]}: the tables must agree",
            )
        self.variables[name] = value
        self.lines.setdefault(name, line)


# --- statements ---------------------------------------------------------------------------


def _hint_names(body: str) -> list[str]:
    """The names of the hints in a hint comment's `body` (`NAME(…), NAME(…)`): the words
    outside parentheses and quotes."""
    names, depth, quote, word = [], 0, "", ""
    for char in body + " ":
        if quote:
            quote = "" if char == quote else quote
        elif char in "'`\"":
            quote = char
        elif char.isalnum() or char == "_":
            word += char if depth == 0 else ""
            continue
        else:
            depth += {"(": 1, ")": -1}.get(char, 0)
        if word:
            names.append(word)
            word = ""
    return names


def _check_hints(line: int, body: str) -> None:
    """Refuse a hint streamjoin would not run: the job would run without it, silently."""
    for name in _hint_names(body):
        if name.upper() not in HINTS:
            raise SqlError(
                line,
                f"the hint {name.upper()} is not supported: the job would run "
                f"without it (hints streamjoin runs: {', '.join(HINTS)})",
            )


def statements(text: str) -> Iterator[tuple[int, str]]:
    """Each statement without its comments, with the line it starts on; a hint streamjoin
    does not run (`HINTS`) is refused, since dropped with its comment the job would run
    without it."""
    current: list[str] = []
    line, start, i, quote = 1, 0, 0, ""
    while i < len(text):
        char = text[i]
        if quote:
            current.append(char)
            if char == quote:
                if text[i + 1 : i + 2] == quote:  # '' inside a string
                    current.append(quote)
                    i += 1
                else:
                    quote = ""
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            skipped = text[i : len(text) if end < 0 else end + 2]
            if skipped.startswith("/*+"):
                _check_hints(line, skipped[3:].removesuffix("*/"))
            line += skipped.count("\n")
            i += len(skipped)
            current.append(" ")
            continue
        elif char in "'`\"":
            quote = char
            current.append(char)
        elif char == ";":
            if "".join(current).strip():
                yield start, "".join(current).strip()
            current = []
        else:
            if not current or not "".join(current).strip():
                start = line if not char.isspace() else start
            current.append(char)
        if char == "\n":
            line += 1
        i += 1
    if "".join(current).strip():
        yield start, "".join(current).strip()


def _outside_quotes(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """Each character outside quotes from `start`: its index, itself, and the parenthesis
    depth once it is read."""
    depth, quote = 0, ""
    for i in range(start, len(text)):
        char = text[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'`\"":
            quote = char
        else:
            depth += {"(": 1, ")": -1}.get(char, 0)
            yield i, char, depth


def _split_top_level(text: str) -> list[str]:
    """`a, b(1, 2), 'x,y'` -> the three items."""
    cuts = [i for i, char, depth in _outside_quotes(text) if char == "," and depth == 0]
    items = (text[a + 1 : b].strip() for a, b in zip([-1, *cuts], [*cuts, len(text)], strict=True))
    return [item for item in items if item]


_NESTED_TYPE = re.compile(r"\b(?:ROW|ARRAY|MAP|MULTISET)\s*$", re.I)


def _split_columns(text: str) -> list[str]:
    """A column list's items: `_split_top_level`, but a nested type's `<…>` (`ROW<a T, b T>`)
    is one item too; a `<` that opens no type (`a < b` in a computed column) is a comparison."""
    cuts, angles = [], []
    for i, char, depth in _outside_quotes(text):
        if char == "<" and _NESTED_TYPE.search(text[:i]):
            angles.append(depth)
        elif char == ">" and angles and angles[-1] == depth:
            angles.pop()
        elif char == "," and depth == 0 and not angles:
            cuts.append(i)
    items = (text[a + 1 : b].strip() for a, b in zip([-1, *cuts], [*cuts, len(text)], strict=True))
    return [item for item in items if item]


def _closing(text: str, opening: int) -> int:
    """The index of the parenthesis closing the one at `opening`, or -1."""
    found = (i for i, char, depth in _outside_quotes(text, opening) if char == ")" and not depth)
    return next(found, -1)


def unquote(name: str) -> str:
    return name[1:-1] if name.startswith("`") else name


def sql_string(text: str) -> str:
    return text.strip()[1:-1].replace("''", "'")


# --- CREATE TABLE --------------------------------------------------------------------------

CREATE_TABLE = re.compile(
    rf"^CREATE\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?({_NAME})\s*\(", re.I | re.S
)
_WATERMARK = re.compile(rf"^WATERMARK\s+FOR\s+({_NAME})\s+AS\s+(.+)$", re.I | re.S)
_DELAY = re.compile(
    rf"^({_NAME})(?:\s*-\s*INTERVAL\s*'(\d+)'\s*({'|'.join(INTERVAL_UNIT_MS)})S?(?:\(\d\))?)?$",
    re.I,
)
_KEY = re.compile(
    rf"^(?:CONSTRAINT\s+{_NAME}\s+)?PRIMARY\s+KEY\s*\(([^)]*)\)\s*(NOT\s+ENFORCED)?$", re.I
)
_COMPUTED = re.compile(rf"^({_NAME})\s+AS\s+(.+)$", re.I | re.S)
# A computed column that converts one column, read as that column declared with the type (the
# decoders read epoch milliseconds and SQL timestamp strings into a timestamp as these do).
_CONVERSIONS = (
    (re.compile(rf"^TO_TIMESTAMP_LTZ\s*\(\s*({_NAME})\s*,\s*3\s*\)$", re.I), "TIMESTAMP_LTZ(3)"),
    (
        re.compile(
            rf"^CAST\s*\(\s*({_NAME})\s+AS\s+(TIMESTAMP(?:_LTZ)?\s*\(\s*[0-9]\s*\))\s*\)$", re.I
        ),
        "",
    ),
)
_METADATA_COLUMN = re.compile(
    rf"^({_NAME})\s+(.+?)\s+METADATA(?:\s+FROM\s+('(?:[^']|'')*'))?(?:\s+VIRTUAL)?$", re.I | re.S
)
_PHYSICAL = re.compile(
    rf"^({_NAME})\s+(.+?)(\s+NOT\s+NULL)?(\s+PRIMARY\s+KEY\s+NOT\s+ENFORCED)?"
    r"(?:\s+COMMENT\s+'(?:[^']|'')*')?$",
    re.I | re.S,
)
_OPTION = re.compile(r"^('(?:[^']|'')*')\s*=\s*('(?:[^']|'')*')$", re.S)


def create_table(line: int, text: str) -> Table:
    match = CREATE_TABLE.match(text)
    assert match is not None
    table = Table(unquote(match[1]), line)
    opening = match.end() - 1
    closing = _closing(text, opening)
    if closing < 0:
        raise SqlError(line, f"CREATE TABLE {table.name}: its column list never closes")
    cursor = opening + 1
    for item in _split_columns(text[opening + 1 : closing]):
        at = text.index(item, cursor)  # each column's own line, for what is told about it
        cursor = at + len(item)
        _column(table, " ".join(item.split()), line + text.count("\n", 0, at))
    rest = text[closing + 1 :].strip()
    options = re.match(r"^WITH\s*\((.*)\)$", rest, re.I | re.S)
    if options is None:
        what = rest.split()[0] if rest else "no WITH (...)"
        raise SqlError(
            line,
            f"CREATE TABLE {table.name}: {what} is not supported (only the "
            "column list and WITH ('connector' = ...))",
        )
    for option in _split_top_level(options[1]):
        pair = _OPTION.match(option.strip())
        if pair is None:
            raise SqlError(
                line,
                f"CREATE TABLE {table.name}: an option is 'key' = 'value', not {option.strip()!r}",
            )
        table.options[sql_string(pair[1])] = sql_string(pair[2])
    return table


def _column_type(line: int, where: str, name: str, kind: str) -> None:
    """A physical column's type, checked where it is written: two columns run together (a
    missing comma) read as one column of a type that is none, and would otherwise be told as a
    column missing far below, in the query."""
    if _is_type(kind):
        return
    first, *rest = kind.split(maxsplit=1)
    hint = f" (a comma missing after {name} {first}?)" if rest and _is_type(first) else ""
    raise SqlError(line, f"{where}: column {name}: {kind} is not a type streamjoin reads{hint}")


def _row_fields(line: int, where: str, name: str, kind: str) -> list[tuple[str, str]]:
    """The fields of a `ROW<a T, b T>` column, each of a type streamjoin reads."""
    inner = kind[kind.index("<") + 1 :].rstrip()
    if not inner.endswith(">"):
        raise SqlError(line, f"{where}: column {name}: {kind} is not a ROW<field TYPE, …>")
    fields = []
    for written in _split_columns(inner[:-1]):
        field_name, _, field_kind = written.partition(" ")
        _column_type(line, where, f"{name}.{unquote(field_name)}", field_kind.strip())
        fields.append((unquote(field_name), field_kind.strip()))
    return fields


def _is_type(kind: str) -> bool:
    try:
        parse_schema(f"c {kind}")
    except SchemaError:
        return False
    return True


def _column(table: Table, item: str, line: int) -> None:
    where = f"CREATE TABLE {table.name}"
    if match := _WATERMARK.match(item):
        delay = _DELAY.match(match[2].strip())
        if delay is None or unquote(delay[1]) != unquote(match[1]):
            raise SqlError(
                line,
                f"{where}: WATERMARK … AS {match[2].strip()} is not supported "
                f"(only {match[1]}, or {match[1]} - INTERVAL 'n' <unit>)",
            )
        delay_ms = int(delay[2]) * INTERVAL_UNIT_MS[delay[3].upper()] if delay[2] else 0
        table.watermark = (unquote(match[1]), delay_ms)
    elif match := _KEY.match(item):
        if not match[2]:
            raise SqlError(line, f"{where}: PRIMARY KEY needs NOT ENFORCED, as in Flink")
        table.primary_key = tuple(unquote(n.strip()) for n in match[1].split(","))
    elif match := _METADATA_COLUMN.match(item):
        name = unquote(match[1])
        key = sql_string(match[3]) if match[3] else name
        if key not in METADATA_TYPES:
            raise SqlError(
                line,
                f"{where}: METADATA FROM '{key}' is not supported (one of "
                + ", ".join(METADATA_TYPES)
                + ")",
            )
        table.physical.append((name, match[2]))
        table.declared.append(name)
        table.metadata[name] = key
    elif match := _COMPUTED.match(item):
        name, expression = unquote(match[1]), match[2].strip()
        table.declared.append(name)
        if re.fullmatch(r"PROCTIME\s*\(\s*\)", expression, re.I):
            table.proctime = name
        elif re.match(r"CASE\b", expression, re.I):  # resolved by a view's WHERE
            table.cases[name] = expression
        else:
            found = [
                (m, kind) for pattern, kind in _CONVERSIONS if (m := pattern.match(expression))
            ]
            if not found:
                raise SqlError(
                    line,
                    f"{where}: the computed column {name} AS {expression} is "
                    "not supported (PROCTIME(), TO_TIMESTAMP_LTZ(column, 3), "
                    "CAST(column AS TIMESTAMP(p)))",
                )
            conversion, kind = found[0]
            table.converted[name] = (unquote(conversion[1]), kind or conversion[2].upper())
    elif match := _PHYSICAL.match(item):
        name = unquote(match[1])
        if re.match(r"ROW\s*<", match[2], re.I):
            table.rows[name] = _row_fields(line, where, name, match[2])
        else:
            _column_type(line, where, name, match[2])
        table.physical.append((name, match[2]))
        table.declared.append(name)
        if match[3]:
            table.not_null.add(name)
        if match[4]:
            table.primary_key = (name,)
    else:
        raise SqlError(line, f"{where}: cannot read the column {item!r}")


# --- connectors ----------------------------------------------------------------------------


def duration(text: str, line: int) -> str:
    """Flink reads a bare number as milliseconds; the variables want a unit. A blank text,
    which would leave a variable at its default, Flink refuses."""
    if not text.strip():
        raise SqlError(line, f"expected {DURATION}; got {text!r}")
    return f"{text.strip()}ms" if text.strip().isdigit() else text.strip()


def _schema(table: Table) -> str:
    types = dict(table.physical)
    for column, (stored, kind) in table.converted.items():
        if stored not in types:
            raise SqlError(
                table.line,
                f"CREATE TABLE {table.name}: the computed column {column} "
                f"reads {stored}, which is no column",
            )
        types[stored] = kind
    return ", ".join(f"{name} {kind}" for name, kind in types.items())


class _Options:
    """A table's options, each consumed once; what is left over is refused."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.left = dict(table.options)

    def take(self, key: str) -> str | None:
        return self.left.pop(key, None)

    def refuse_rest(self) -> None:
        for key, default in _DEFAULT_ONLY.items():
            value = self.left.pop(key, default)
            if value.lower() != default.lower():
                raise SqlError(
                    self.table.line,
                    f"CREATE TABLE {self.table.name}: '{key}' "
                    f"{value!r} is not supported (only Flink's default, "
                    f"{default!r})",
                )
        if self.left:
            key = sorted(self.left)[0]
            raise SqlError(
                self.table.line,
                f"CREATE TABLE {self.table.name}: the option '{key}' is not supported",
            )


def _kafka_properties(options: _Options, out: Compiled, source: bool = False) -> None:
    """A source's group and reset become KAFKA_GROUP_ID and KAFKA_AUTO_OFFSET_RESET; a sink's
    are ignored, as Flink's Kafka sink ignores them."""
    line = options.table.line
    for key in sorted(k for k in options.left if k.startswith("properties.")):
        value, prop = options.take(key) or "", key[len("properties.") :]
        if prop == "bootstrap.servers":
            out.set("KAFKA_BOOTSTRAP_SERVERS", value, line)
        elif prop in ("group.id", "auto.offset.reset"):
            if source:
                out.set(f"KAFKA_{prop.upper().replace('.', '_')}", value, line)
        elif is_secret(prop):
            variable = "KAFKA_" + prop.upper().replace(".", "_")
            raise SqlError(
                line,
                f"'{key}' is a secret: give it as the variable {variable} "
                "(from a Secret), not in the SQL",
            )
        else:
            out.set(f"KAFKA_{prop}", value, line)


def _registry(options: _Options, out: Compiled) -> None:
    for prefix in ("", "value.", "key."):
        url = options.take(f"{prefix}avro-confluent.url")
        if url is not None:
            out.set("SCHEMA_REGISTRY_URL", url, options.table.line)
    for key in [k for k in options.left if "avro-confluent." in k]:
        if is_secret(key):
            raise SqlError(
                options.table.line,
                f"'{key}' is a secret: give it as a "
                "SCHEMA_REGISTRY_* variable from a Secret, not in the SQL",
            )


def _format(options: _Options, upsert: bool) -> str:
    table, line = options.table, options.table.line
    value = options.take("value.format") or options.take("format")
    if upsert:
        key = options.take("key.format")
        if value != "json" or key not in (None, "json", "raw"):
            raise SqlError(
                line,
                f"CREATE TABLE {table.name}: upsert-kafka reads 'key.format' "
                "json and 'value.format' json here",
            )
        if not table.primary_key:
            raise SqlError(line, f"CREATE TABLE {table.name}: upsert-kafka needs a PRIMARY KEY")
        return "upsert"
    if value not in _FORMATS:
        raise SqlError(
            line,
            f"CREATE TABLE {table.name}: 'format' {value!r} is not supported "
            "(one of " + ", ".join(_FORMATS) + ")",
        )
    return value


def input_table(table: Table, side: str, out: Compiled, time: str) -> None:
    """The variables of one Kafka input: `side` is LEFT or RIGHT, `time` its time attribute."""
    options, line = _Options(table), table.line
    connector = options.take("connector")
    if connector not in ("kafka", "upsert-kafka"):
        raise SqlError(
            line,
            f"CREATE TABLE {table.name}: 'connector' {connector!r} is not an "
            "input streamjoin reads (kafka, upsert-kafka)",
        )
    nested = [*table.rows, *table.cases]
    if nested:
        raise SqlError(
            line,
            f"CREATE TABLE {table.name}: the column {nested[0]} is read through a view "
            f"(CREATE VIEW v AS SELECT <its fields> FROM {table.name} WHERE …)",
        )
    topic = _topic(options)
    out.set(f"{side}_TOPIC", topic, line)
    out.set(f"{side}_FORMAT", _format(options, connector == "upsert-kafka"), line)
    out.set(f"{side}_SCHEMA", _schema(table), line)
    if table.primary_key:
        out.set(f"{side}_PRIMARY_KEY", ",".join(table.primary_key), line)
    if table.metadata:
        out.set(f"{side}_METADATA", ",".join(f"{c}={k}" for c, k in table.metadata.items()), line)
    if table.paths:
        out.set(f"{side}_FIELDS", ",".join(f"{c}={p}" for c, p in table.paths.items()), line)
    if table.where:
        where = ",".join(f"{f}={json.dumps(v)}" for f, v in table.where.items())
        out.set(f"{side}_WHERE", where, line)
    out.set(f"{side}_TIME", table.stored(time), line)
    if table.watermark and table.watermark[0] == time:
        out.set(f"{side}_WATERMARK_DELAY", f"{table.watermark[1]}ms", line)
    mode = options.take("scan.startup.mode")
    if mode is not None and mode not in _STARTUP and mode not in _STARTUP_WITH:
        raise SqlError(
            line,
            f"CREATE TABLE {table.name}: 'scan.startup.mode' {mode!r} is not "
            "supported (earliest-offset, latest-offset, group-offsets, specific-offsets, "
            "timestamp; a restart resumes from the checkpoint)",
        )
    if connector == "upsert-kafka":
        if mode is not None:  # Flink refuses the option on upsert-kafka
            raise SqlError(
                line,
                f"CREATE TABLE {table.name}: an upsert-kafka table reads "
                "its topic from the beginning: 'scan.startup.mode' is not its "
                "option",
            )
        start: str | dict = "earliest"
    elif mode in _STARTUP_WITH:
        start = _startup_at(options, mode)
    elif mode is not None:
        start = _STARTUP[mode]
    elif "properties.group.id" in options.left:
        start = "group-offsets"  # Flink's default mode, where a group is named
    else:
        start = "earliest"  # no group to start from: the topic's beginning
    for key in _STARTUP_WITH.values():  # a mode's option beside another mode: unused, as in Flink
        options.take(key)
    out.starts[topic] = (start, line)
    options.take("sink.partitioner")  # a table read, not written: how it is written is moot
    _kafka_properties(options, out, source=True)
    _registry(options, out)
    options.refuse_rest()


def _startup_at(options: _Options, mode: str) -> str | dict:
    """The start of a `specific-offsets` or `timestamp` mode from its option, as Flink reads
    it: the partitions named at their offsets, the others at the group's committed offsets (the
    earliest where it has none, or without a group); each partition at its first record at or
    after the time."""
    key, table = _STARTUP_WITH[mode], options.table
    text = options.take(key)
    if text is None:
        raise SqlError(
            table.line,
            f"CREATE TABLE {table.name}: '{key}' is required in '{mode}' startup mode but missing",
        )
    if mode == "timestamp":
        if not text.strip().isdigit():
            raise SqlError(table.line, f"CREATE TABLE {table.name}: '{key}' {text!r} is not a long")
        return f"timestamp:{int(text)}"
    offsets: dict[str, int | str] = {}
    for item in text.split(";"):
        pair = dict(kv.split(":", 1) for kv in item.split(",") if ":" in kv)
        if (
            len(item.split(",")) != 2
            or set(pair) != {"partition", "offset"}
            or not all(v.isdigit() for v in pair.values())
        ):
            raise SqlError(
                table.line,
                f"CREATE TABLE {table.name}: invalid value for key '{key}': specific offsets "
                f"should follow the format '{_SPECIFIC_OFFSETS}'",
            )
        offsets[str(int(pair["partition"]))] = int(pair["offset"])
    if "properties.group.id" in options.left:
        offsets[OTHER_PARTITIONS] = "group-offsets"
    return offsets


def _topic(options: _Options) -> str:
    topic = options.take("topic")
    if topic is None or ";" in topic:
        raise SqlError(
            options.table.line,
            f"CREATE TABLE {options.table.name}: one 'topic' is "
            "needed (no list, no 'topic-pattern')",
        )
    return topic


def starting_offsets(out: Compiled) -> None:
    """STARTING_OFFSETS from the inputs' startup modes: their common one, or each topic's."""
    modes = [mode for mode, _line in out.starts.values()]
    line = min((line for _mode, line in out.starts.values()), default=1)
    if all(mode == "earliest" for mode in modes):
        return  # the default
    if isinstance(modes[0], str) and modes.count(modes[0]) == len(modes):
        out.set("STARTING_OFFSETS", modes[0], line)
    else:
        spec = {topic: mode for topic, (mode, _line) in sorted(out.starts.items())}
        out.set("STARTING_OFFSETS", json.dumps(spec), line)


def output_table(table: Table, out: Compiled) -> None:
    options, line = _Options(table), table.line
    connector = options.take("connector")
    if connector == "blackhole":  # Flink's sink that drops every row: a benchmark's
        out.set("OUTPUT_SINK", "blackhole", line)
        _output_schema(table, out)
        out.set("OUTPUT_TOPIC", table.name, line)  # names its dead-letter topic
        options.refuse_rest()
        return
    if connector not in ("kafka", "upsert-kafka"):
        raise SqlError(
            line,
            f"CREATE TABLE {table.name}: 'connector' {connector!r} is not an "
            "output streamjoin writes (kafka, upsert-kafka, blackhole)",
        )
    out.set("OUTPUT_TOPIC", _topic(options), line)
    _output_schema(table, out)
    value = options.take("value.format") or options.take("format")
    key_fields = options.take("key.fields")
    options.take("key.format")
    if connector == "upsert-kafka":
        if not table.primary_key:
            raise SqlError(line, f"CREATE TABLE {table.name}: upsert-kafka needs a PRIMARY KEY")
        out.set("OUTPUT_ENCODING", "upsert", line)
        out.set("OUTPUT_KEY", ",".join(table.primary_key), line)
    elif value in ("debezium-json",):
        out.set("OUTPUT_ENCODING", "debezium-json", line)
    else:
        out.set("OUTPUT_ENCODING", "append", line)
    formats = (*OUTPUT_FORMATS, "debezium-json")  # the last an encoding, as Flink sees it
    if value not in formats:
        raise SqlError(
            line,
            f"CREATE TABLE {table.name}: 'format' {value!r} is not an output "
            "format (" + ", ".join(formats) + ")",
        )
    out.set("OUTPUT_FORMAT", value if value in OUTPUT_FORMATS else "json", line)
    if key_fields and connector == "kafka":
        out.set("OUTPUT_KEY", ",".join(k.strip() for k in key_fields.split(";")), line)
    guarantee = options.take("sink.delivery-guarantee")
    if guarantee is not None:
        if guarantee not in ("exactly-once", "at-least-once"):
            raise SqlError(
                line,
                f"'sink.delivery-guarantee' {guarantee!r} is not supported "
                "(exactly-once, at-least-once)",
            )
        out.set("OUTPUT_DELIVERY", guarantee, line)
    prefix = options.take("sink.transactional-id-prefix")
    if prefix is not None:
        out.set("OUTPUT_TRANSACTIONAL_ID", prefix, line)
    _kafka_properties(options, out)
    _registry(options, out)
    options.refuse_rest()


def _output_schema(table: Table, out: Compiled) -> None:
    """The output table's columns with their types: what the select list is cast to."""
    types, names = dict(table.physical), table.columns()
    if all(name in types for name in names):  # (a metadata column has no value type here)
        out.set("OUTPUT_SCHEMA", ", ".join(f"{n} {types[n]}" for n in names), table.line)


# Flink's `lookup.*` options, each the variable it stands for (`app.config.registry`)
_LOOKUP_OPTIONS = flink_options("lookup.")


def jdbc_table(table: Table, out: Compiled) -> None:
    """The right side of a lookup join: Flink's JDBC connector over PostgreSQL."""
    options, line = _Options(table), table.line
    options.take("connector")
    url = options.take("url") or ""
    match = re.match(r"^jdbc:postgresql://(.+)$", url)
    if match is None:
        raise SqlError(line, f"CREATE TABLE {table.name}: 'url' must be jdbc:postgresql://…")
    if options.take("password") is not None:
        raise SqlError(
            line,
            f"CREATE TABLE {table.name}: 'password' is a secret: give it as "
            "the variable LOOKUP_PASSWORD (from a Secret), not in the SQL",
        )
    user = options.take("username")
    out.set("LOOKUP_URL", f"postgresql://{user + '@' if user else ''}{match[1]}", line)
    out.set("LOOKUP_TABLE", options.take("table-name") or table.name, line)
    out.set("RIGHT_SCHEMA", _schema(table), line)
    strategy = options.take("lookup.full-cache.reload-strategy")
    if strategy not in (None, "PERIODIC"):
        raise SqlError(
            line, f"'lookup.full-cache.reload-strategy' {strategy!r} is not supported (PERIODIC)"
        )
    for key, variable in _LOOKUP_OPTIONS.items():
        value = options.take(key)
        if value is not None:
            takes_duration = VARIABLES[variable].parse is duration_ms
            out.set(variable, duration(value, line) if takes_duration else value, line)
    options.refuse_rest()
