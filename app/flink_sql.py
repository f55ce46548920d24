"""Flink SQL as the configuration: `STREAMJOIN_SQL` (the text) or `STREAMJOIN_SQL_FILE` (a path).

A script as Flink's SQL client takes it: `SET 'table.exec.state.ttl' = …`, a `CREATE [TEMPORARY]
TABLE … WITH (…)` for each input and for the output (Flink's `kafka`, `upsert-kafka` and `jdbc`
connectors), and one `INSERT INTO out SELECT … FROM a … JOIN b …`. It is compiled into the
environment variables it stands for (`LEFT_TOPIC`, `JOIN_TYPE`, `JOIN_ON`, …), so SQL and
variables share one code path after this module: the same checks, plan, `check` and `explain`.

The join's form follows from the SQL as Flink's planner decides it: `FOR SYSTEM_TIME AS OF` the
left's rowtime is an event-time temporal join, as of a `PROCTIME()` column a processing-time one
(a lookup join when the table is `jdbc`); a condition bounding one input's rowtime by the
other's is an interval join; anything else a regular join; `IN` / `EXISTS` subqueries are semi
joins, `NOT EXISTS` and `NOT IN` anti joins (`NOT IN` null-aware, as Flink's: over nullable
columns its condition is `L.a = R.d OR L.a IS NULL OR R.d IS NULL`, which has no join key).
Aliases and table names become `L` / `R`, unqualified columns are qualified by the table that
has them, and the select list takes the output table's column names by position, as Flink's
INSERT does.

What Flink accepts and streamjoin does not run (GROUP BY, window functions, a third table, an
option it does not know, a secret in the text) is refused, naming the construct and its line.
Secrets stay variables (a ConfigMap holds this text): `'password'`, `'properties.sasl.jaas.config'`
and the like are refused with the variable to use instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from app.redaction import is_secret
from state.condition import FLINK_LEXICON
from state.functions import describe, unsupported

SQL_TEXT = "STREAMJOIN_SQL"
SQL_VARIABLES = (SQL_TEXT, "STREAMJOIN_SQL_FILE")

_NAME = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_$]*)"
_UNITS_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000,
             "DAY": 86_400_000}  # fmt: skip
_FORMATS = {"json": "json", "avro-confluent": "avro-confluent", "debezium-json": "debezium-json",
            "debezium-avro-confluent": "debezium-avro-confluent"}  # fmt: skip
_STARTUP = {"earliest-offset": "earliest", "latest-offset": "latest"}
_METADATA = ("timestamp", "value.source.timestamp", "partition", "offset", "topic")
# Options of Flink's connectors that change nothing here (offsets live in the checkpoint).
_IGNORED = {"properties.group.id", "value.fields-include", "sink.partitioner"}


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
    epoch_ms: dict[str, str] = field(default_factory=dict)  # `t AS TO_TIMESTAMP_LTZ(ms, 3)`
    watermark: tuple[str, int] | None = None  # (rowtime column, delay ms)
    primary_key: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    declared: list[str] = field(default_factory=list)  # every column's name, in order

    def columns(self) -> list[str]:
        """Every column a query can name, in declared order: not the proctime one (it has no
        value here), nor the column a TO_TIMESTAMP_LTZ column reads (it becomes that one)."""
        hidden = {self.proctime, *self.epoch_ms.values()}
        return [name for name in self.declared if name not in hidden]

    def stored(self, column: str) -> str:
        """The column of the records a query's column is: `t AS TO_TIMESTAMP_LTZ(ms, 3)` is ms."""
        return self.epoch_ms.get(column, column)


@dataclass
class Compiled:
    """The variables the script stands for, and the line each was set by."""

    variables: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def set(self, name: str, value: str, line: int) -> None:
        if name in self.variables and self.variables[name] != value:
            raise SqlError(line, f"{name} would be {value!r} here but {self.variables[name]!r} "
                           f"from line {self.lines[name]}: the tables must agree")  # fmt: skip
        self.variables[name] = value
        self.lines.setdefault(name, line)


# --- statements ---------------------------------------------------------------------------


def statements(text: str) -> Iterator[tuple[int, str]]:
    """Each statement without its comments, with the line it starts on."""
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


def _split_top_level(text: str) -> list[str]:
    """`a, b(1, 2), 'x,y'` -> the three items."""
    items, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'`\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if "".join(current).strip():
        items.append("".join(current).strip())
    return items


def _closing(text: str, opening: int) -> int:
    """The index of the parenthesis closing the one at `opening`."""
    depth, quote = 0, ""
    for i in range(opening, len(text)):
        char = text[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'`\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _unquote(name: str) -> str:
    return name[1:-1] if name.startswith("`") else name


def _string(text: str) -> str:
    return text.strip()[1:-1].replace("''", "'")


# --- CREATE TABLE --------------------------------------------------------------------------

_CREATE = re.compile(
    rf"^CREATE\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?({_NAME})\s*\(", re.I | re.S
)
_WATERMARK = re.compile(rf"^WATERMARK\s+FOR\s+({_NAME})\s+AS\s+(.+)$", re.I | re.S)
_DELAY = re.compile(
    rf"^({_NAME})(?:\s*-\s*INTERVAL\s*'(\d+)'\s*(MILLISECOND|SECOND|MINUTE|HOUR|DAY)S?(?:\(\d\))?)?$",
    re.I,
)
_KEY = re.compile(
    rf"^(?:CONSTRAINT\s+{_NAME}\s+)?PRIMARY\s+KEY\s*\(([^)]*)\)\s*(NOT\s+ENFORCED)?$", re.I
)
_COMPUTED = re.compile(rf"^({_NAME})\s+AS\s+(.+)$", re.I | re.S)
_EPOCH = re.compile(rf"^TO_TIMESTAMP_LTZ\s*\(\s*({_NAME})\s*,\s*3\s*\)$", re.I)
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
    match = _CREATE.match(text)
    assert match is not None
    table = Table(_unquote(match[1]), line)
    opening = match.end() - 1
    closing = _closing(text, opening)
    if closing < 0:
        raise SqlError(line, f"CREATE TABLE {table.name}: its column list never closes")
    for item in _split_top_level(text[opening + 1 : closing]):
        _column(table, " ".join(item.split()))
    rest = text[closing + 1 :].strip()
    options = re.match(r"^WITH\s*\((.*)\)$", rest, re.I | re.S)
    if options is None:
        what = rest.split()[0] if rest else "no WITH (...)"
        raise SqlError(line, f"CREATE TABLE {table.name}: {what} is not supported (only the "
                       "column list and WITH ('connector' = ...))")  # fmt: skip
    for option in _split_top_level(options[1]):
        pair = _OPTION.match(option.strip())
        if pair is None:
            raise SqlError(line, f"CREATE TABLE {table.name}: an option is 'key' = 'value', "
                           f"not {option.strip()!r}")  # fmt: skip
        table.options[_string(pair[1])] = _string(pair[2])
    return table


def _column(table: Table, item: str) -> None:
    line, where = table.line, f"CREATE TABLE {table.name}"
    if match := _WATERMARK.match(item):
        delay = _DELAY.match(match[2].strip())
        if delay is None or _unquote(delay[1]) != _unquote(match[1]):
            raise SqlError(line, f"{where}: WATERMARK … AS {match[2].strip()} is not supported "
                           f"(only {match[1]}, or {match[1]} - INTERVAL 'n' <unit>)")  # fmt: skip
        delay_ms = int(delay[2]) * _UNITS_MS[delay[3].upper()] if delay[2] else 0
        table.watermark = (_unquote(match[1]), delay_ms)
    elif match := _KEY.match(item):
        if not match[2]:
            raise SqlError(line, f"{where}: PRIMARY KEY needs NOT ENFORCED, as in Flink")
        table.primary_key = tuple(_unquote(n.strip()) for n in match[1].split(","))
    elif match := _METADATA_COLUMN.match(item):
        name = _unquote(match[1])
        key = _string(match[3]) if match[3] else name
        if key not in _METADATA:
            raise SqlError(line, f"{where}: METADATA FROM '{key}' is not supported (one of "
                           + ", ".join(_METADATA) + ")")  # fmt: skip
        table.physical.append((name, match[2]))
        table.declared.append(name)
        table.metadata[name] = key
    elif match := _COMPUTED.match(item):
        name, expression = _unquote(match[1]), match[2].strip()
        table.declared.append(name)
        if re.fullmatch(r"PROCTIME\s*\(\s*\)", expression, re.I):
            table.proctime = name
        elif epoch := _EPOCH.match(expression):
            table.epoch_ms[name] = _unquote(epoch[1])
        else:
            raise SqlError(line, f"{where}: the computed column {name} AS {expression} is not "
                           "supported (PROCTIME(), TO_TIMESTAMP_LTZ(column, 3))")  # fmt: skip
    elif match := _PHYSICAL.match(item):
        name = _unquote(match[1])
        table.physical.append((name, match[2]))
        table.declared.append(name)
        if match[3]:
            table.not_null.add(name)
        if match[4]:
            table.primary_key = (name,)
    else:
        raise SqlError(line, f"{where}: cannot read the column {item!r}")


# --- connectors ----------------------------------------------------------------------------


def _duration(text: str) -> str:
    """Flink reads a bare number as milliseconds; the variables want a unit."""
    return f"{text.strip()}ms" if text.strip().isdigit() else text.strip()


def _schema(table: Table) -> str:
    types = dict(table.physical)
    for column, stored in table.epoch_ms.items():
        if stored not in types:
            raise SqlError(table.line, f"CREATE TABLE {table.name}: {column} AS TO_TIMESTAMP_LTZ"
                           f"({stored}, 3) names no column")  # fmt: skip
        types[stored] = "TIMESTAMP_LTZ(3)"  # epoch milliseconds read as Flink's function does
    return ", ".join(f"{name} {kind}" for name, kind in types.items())


class _Options:
    """A table's options, each consumed once; what is left over is refused."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.left = dict(table.options)

    def take(self, key: str) -> str | None:
        return self.left.pop(key, None)

    def refuse_rest(self) -> None:
        for key in _IGNORED:
            self.left.pop(key, None)
        if self.left:
            key = sorted(self.left)[0]
            raise SqlError(self.table.line, f"CREATE TABLE {self.table.name}: the option "
                           f"'{key}' is not supported")  # fmt: skip


def _kafka_properties(options: _Options, out: Compiled) -> None:
    line = options.table.line
    for key in sorted(k for k in options.left if k.startswith("properties.")):
        value, prop = options.take(key) or "", key[len("properties.") :]
        if prop == "bootstrap.servers":
            out.set("KAFKA_BOOTSTRAP_SERVERS", value, line)
        elif prop == "group.id":
            continue
        elif is_secret(prop):
            variable = "KAFKA_" + prop.upper().replace(".", "_")
            raise SqlError(line, f"'{key}' is a secret: give it as the variable {variable} "
                           "(from a Secret), not in the SQL")  # fmt: skip
        else:
            out.set(f"KAFKA_{prop}", value, line)


def _registry(options: _Options, out: Compiled) -> None:
    for prefix in ("", "value.", "key."):
        url = options.take(f"{prefix}avro-confluent.url")
        if url is not None:
            out.set("SCHEMA_REGISTRY_URL", url, options.table.line)
    for key in [k for k in options.left if "avro-confluent." in k]:
        if is_secret(key):
            raise SqlError(options.table.line, f"'{key}' is a secret: give it as a "
                           "SCHEMA_REGISTRY_* variable from a Secret, not in the SQL")  # fmt: skip


def _format(options: _Options, upsert: bool) -> str:
    table, line = options.table, options.table.line
    value = options.take("value.format") or options.take("format")
    if upsert:
        key = options.take("key.format")
        if value != "json" or key not in (None, "json", "raw"):
            raise SqlError(line, f"CREATE TABLE {table.name}: upsert-kafka reads 'key.format' "
                           "json and 'value.format' json here")  # fmt: skip
        if not table.primary_key:
            raise SqlError(line, f"CREATE TABLE {table.name}: upsert-kafka needs a PRIMARY KEY")
        return "upsert"
    if value not in _FORMATS:
        raise SqlError(line, f"CREATE TABLE {table.name}: 'format' {value!r} is not supported "
                       "(one of " + ", ".join(_FORMATS) + ")")  # fmt: skip
    return _FORMATS[value]


def input_table(table: Table, side: str, out: Compiled, time: str) -> None:
    """The variables of one Kafka input: `side` is LEFT or RIGHT, `time` its time attribute."""
    options, line = _Options(table), table.line
    connector = options.take("connector")
    if connector not in ("kafka", "upsert-kafka"):
        raise SqlError(line, f"CREATE TABLE {table.name}: 'connector' {connector!r} is not an "
                       "input streamjoin reads (kafka, upsert-kafka)")  # fmt: skip
    out.set(f"{side}_TOPIC", _topic(options), line)
    out.set(f"{side}_FORMAT", _format(options, connector == "upsert-kafka"), line)
    out.set(f"{side}_SCHEMA", _schema(table), line)
    if table.primary_key:
        out.set(f"{side}_PRIMARY_KEY", ",".join(table.primary_key), line)
    if table.metadata:
        out.set(f"{side}_METADATA", ",".join(f"{c}={k}" for c, k in table.metadata.items()), line)
    out.set(f"{side}_TIME", table.stored(time), line)
    if table.watermark and table.watermark[0] == time:
        out.set(f"{side}_WATERMARK_DELAY", f"{table.watermark[1]}ms", line)
    mode = options.take("scan.startup.mode")
    if mode is not None:
        if mode not in _STARTUP:
            raise SqlError(line, f"CREATE TABLE {table.name}: 'scan.startup.mode' {mode!r} is "
                           "not supported (earliest-offset, latest-offset; a restart resumes "
                           "from the checkpoint)")  # fmt: skip
        out.set("STARTING_OFFSETS", _STARTUP[mode], line)
    _kafka_properties(options, out)
    _registry(options, out)
    options.refuse_rest()


def _topic(options: _Options) -> str:
    topic = options.take("topic")
    if topic is None or ";" in topic:
        raise SqlError(options.table.line, f"CREATE TABLE {options.table.name}: one 'topic' is "
                       "needed (no list, no 'topic-pattern')")  # fmt: skip
    return topic


def output_table(table: Table, out: Compiled) -> None:
    options, line = _Options(table), table.line
    connector = options.take("connector")
    if connector not in ("kafka", "upsert-kafka"):
        raise SqlError(line, f"CREATE TABLE {table.name}: 'connector' {connector!r} is not an "
                       "output streamjoin writes (kafka, upsert-kafka)")  # fmt: skip
    out.set("OUTPUT_TOPIC", _topic(options), line)
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
    if value not in ("json", "avro-confluent", "debezium-json"):
        raise SqlError(line, f"CREATE TABLE {table.name}: 'format' {value!r} is not an output "
                       "format (json, avro-confluent, debezium-json)")  # fmt: skip
    out.set("OUTPUT_FORMAT", "avro-confluent" if value == "avro-confluent" else "json", line)
    if key_fields and connector == "kafka":
        out.set("OUTPUT_KEY", ",".join(k.strip() for k in key_fields.split(";")), line)
    guarantee = options.take("sink.delivery-guarantee")
    if guarantee is not None:
        if guarantee not in ("exactly-once", "at-least-once"):
            raise SqlError(line, f"'sink.delivery-guarantee' {guarantee!r} is not supported "
                           "(exactly-once, at-least-once)")  # fmt: skip
        out.set("OUTPUT_DELIVERY", guarantee, line)
    prefix = options.take("sink.transactional-id-prefix")
    if prefix is not None:
        out.set("OUTPUT_TRANSACTIONAL_ID", prefix, line)
    _kafka_properties(options, out)
    _registry(options, out)
    options.refuse_rest()


_LOOKUP_OPTIONS = {
    "lookup.cache": "LOOKUP_CACHE",
    "lookup.partial-cache.max-rows": "LOOKUP_PARTIAL_CACHE_MAX_ROWS",
    "lookup.partial-cache.expire-after-write": "LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_WRITE",
    "lookup.partial-cache.expire-after-access": "LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_ACCESS",
    "lookup.partial-cache.cache-missing-key": "LOOKUP_PARTIAL_CACHE_CACHE_MISSING_KEY",
    "lookup.full-cache.periodic-reload.interval": "LOOKUP_FULL_CACHE_RELOAD_INTERVAL",
    "lookup.max-retries": "LOOKUP_MAX_RETRIES",
    "lookup.async": "LOOKUP_ASYNC",
}
_DURATIONS = {"LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_WRITE", "LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_ACCESS",
              "LOOKUP_FULL_CACHE_RELOAD_INTERVAL"}  # fmt: skip


def jdbc_table(table: Table, out: Compiled) -> None:
    """The right side of a lookup join: Flink's JDBC connector over PostgreSQL."""
    options, line = _Options(table), table.line
    options.take("connector")
    url = options.take("url") or ""
    match = re.match(r"^jdbc:postgresql://(.+)$", url)
    if match is None:
        raise SqlError(line, f"CREATE TABLE {table.name}: 'url' must be jdbc:postgresql://…")
    if options.take("password") is not None:
        raise SqlError(line, f"CREATE TABLE {table.name}: 'password' is a secret: give it as "
                       "the variable LOOKUP_PASSWORD (from a Secret), not in the SQL")  # fmt: skip
    user = options.take("username")
    out.set("LOOKUP_URL", f"postgresql://{user + '@' if user else ''}{match[1]}", line)
    out.set("LOOKUP_TABLE", options.take("table-name") or table.name, line)
    out.set("RIGHT_SCHEMA", _schema(table), line)
    strategy = options.take("lookup.full-cache.reload-strategy")
    if strategy not in (None, "PERIODIC"):
        raise SqlError(line, f"'lookup.full-cache.reload-strategy' {strategy!r} is not "
                       "supported (PERIODIC)")  # fmt: skip
    for key, variable in _LOOKUP_OPTIONS.items():
        value = options.take(key)
        if value is not None:
            out.set(variable, _duration(value) if variable in _DURATIONS else value, line)
    options.refuse_rest()


# --- the query -----------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinQuery:
    """A SELECT over two tables as the join variables say it."""

    type: str
    kind: str
    left: str
    right: str
    on: str
    select: str


class _Sides:
    """Resolves a query's names to `L` / `R`."""

    def __init__(self, line: int, left: Table, right: Table, left_names: set[str],
                 right_names: set[str], prefer: str | None = None) -> None:  # fmt: skip
        """`prefer`: the side an unqualified name both tables have is (a subquery's own)."""
        self.line, self.tables, self.prefer = line, {"L": left, "R": right}, prefer
        self.visible = "LR"  # the tables the query's own names may be of
        self.names = {**{n.lower(): "R" for n in right_names},
                      **{n.lower(): "L" for n in left_names}}  # fmt: skip

    def inner(self) -> _Sides:
        """The same names, read inside a subquery over the right table."""
        sides = _Sides(self.line, self.tables["L"], self.tables["R"], set(), set(), prefer="R")
        sides.names = self.names
        return sides

    def side_of(self, column: exp.Column) -> str:
        qualifier = column.table.lower()
        if qualifier:
            if qualifier not in self.names:
                raise SqlError(self.line, f"{column.sql()}: no table or alias {column.table}")
            side = self.names[qualifier]
            if column.name not in [*self.tables[side].columns(), self.tables[side].proctime]:
                raise SqlError(self.line, f"{column.sql()}: {self.tables[side].name} has no "
                               f"column {column.name}")  # fmt: skip
            return side
        found = [s for s in self.visible if column.name in self.tables[s].columns()]
        if len(found) == 2 and self.prefer:
            return self.prefer
        if len(found) != 1:
            why = "is in both tables: qualify it" if found else "is in neither table"
            raise SqlError(self.line, f"column {column.name} {why}")
        return found[0]

    def rewrite(self, node: exp.Expression) -> exp.Expression:
        """Columns as `L.x` / `R.y` (a computed epoch column as the column it reads)."""

        def one(part: exp.Expression) -> exp.Expression:
            if isinstance(part, exp.Column) and not isinstance(part.this, exp.Star):
                side = self.side_of(part)
                table = self.tables[side]
                if part.name == table.proctime:
                    raise SqlError(self.line, f"{part.sql()}: the processing-time column is "
                                   "only for FOR SYSTEM_TIME AS OF")  # fmt: skip
                return _column_of(side, table.stored(part.name))
            return part

        return node.copy().transform(one)


def _identifier(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def _column_of(side: str, name: str) -> exp.Column:
    return exp.column(name, table=side, quoted=_identifier(name) != name)


def _refuse_clauses(line: int, select: exp.Select) -> None:
    for key, what in (("group", "GROUP BY"), ("having", "HAVING"), ("order", "ORDER BY"),
                      ("limit", "LIMIT"), ("distinct", "DISTINCT"), ("with", "WITH"),
                      ("windows", "WINDOW"), ("qualify", "QUALIFY")):  # fmt: skip
        if select.args.get(key):
            raise SqlError(line, f"{what} is not supported: streamjoin runs one join")
    for node in select.expressions:
        if node.find(exp.AggFunc):
            raise SqlError(line, f"{node.find(exp.AggFunc).sql()}: aggregates are not supported")
        if node.find(exp.Window):
            raise SqlError(line, "OVER windows are not supported")


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    node = node.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _and(parts: list[exp.Expression]) -> exp.Expression | None:
    return exp.and_(*parts) if parts else None


def _table_of(line: int, node: exp.Expression, tables: dict[str, Table]) -> tuple[Table, str]:
    if not isinstance(node, exp.Table) or node.args.get("db") or not node.name:
        raise SqlError(line, f"{node.sql()} is not supported: only a table is joined (no "
                       "subquery, table function or window)")  # fmt: skip
    if node.name not in tables:
        raise SqlError(line, f"no table {node.name} (CREATE TABLE it first)")
    return tables[node.name], node.alias or node.name


def compile_query(line: int, query: exp.Expression, tables: dict[str, Table],
                  outputs: list[str] | None) -> tuple[JoinQuery, Table, Table]:  # fmt: skip
    """The join a SELECT is; `outputs`: the output table's columns (the select list's names)."""
    if not isinstance(query, exp.Select):
        raise SqlError(line, f"{query.key.upper()} is not supported: one SELECT … JOIN")
    _refuse_clauses(line, query)
    if query.args.get("laterals"):
        raise SqlError(line, "LATERAL TABLE (a temporal table function) is not supported in "
                       "SQL: set JOIN_TYPE=temporal-function")  # fmt: skip
    source = query.args.get("from_") or query.args.get("from")
    if source is None:
        raise SqlError(line, "a SELECT without FROM")
    left, left_alias = _table_of(line, source.this, tables)
    joins = query.args.get("joins") or []
    where = _conjuncts(query.args.get("where").this if query.args.get("where") else None)
    if len(joins) > 1:
        raise SqlError(line, f"{len(joins) + 1} tables joined: streamjoin joins two")
    if not joins:
        return _subquery_join(line, query, tables, left, left_alias, where, outputs)
    join = joins[0]
    right, right_alias = _table_of(line, join.this, tables)
    sides = _Sides(line, left, right, {left_alias, left.name}, {right_alias, right.name})
    kind = (join.side or "inner").lower()
    if join.kind and join.kind.upper() in ("SEMI", "ANTI", "NATURAL"):
        raise SqlError(line, f"{join.kind.upper()} JOIN is not supported")
    on = _conjuncts(join.args.get("on"))
    if join.args.get("using"):
        raise SqlError(line, "JOIN … USING is not supported: write ON")
    if where and kind != "inner":
        raise SqlError(line, f"a WHERE after a {kind.upper()} JOIN is not supported: put the "
                       "condition in ON")  # fmt: skip
    on += where
    if not on:
        raise SqlError(line, "a join without a condition (a cross join) is not supported")
    version = join.this.args.get("version")
    join_type = "regular"
    if version is not None:
        join_type = _temporal_type(line, sides, version, right, kind)
    elif _bounds_time(sides, on, left, right):
        join_type = "interval"
    condition = _and([sides.rewrite(part) for part in on])
    assert condition is not None
    select = _select_list(line, query, sides, outputs)
    return JoinQuery(join_type, kind, left.name, right.name, condition.sql(FLINK_LEXICON),
                     select), left, right  # fmt: skip


def _temporal_type(line: int, sides: _Sides, version: exp.Expression, right: Table,
                   kind: str) -> str:  # fmt: skip
    at = version.args.get("expression")
    if kind not in ("inner", "left"):
        raise SqlError(line, f"a {kind.upper()} temporal join is not supported (INNER, LEFT), "
                       "as in Flink")  # fmt: skip
    if not isinstance(at, exp.Column) or sides.side_of(at) != "L":
        raise SqlError(line, "FOR SYSTEM_TIME AS OF must name a time column of the left table")
    left = sides.tables["L"]
    if at.name == left.proctime:
        return "lookup" if right.options.get("connector") == "jdbc" else "temporal-proctime"
    if left.watermark is None or left.watermark[0] != at.name:
        raise SqlError(line, f"FOR SYSTEM_TIME AS OF {at.sql()}: the left's rowtime (its "
                       "WATERMARK column) or a PROCTIME() column")  # fmt: skip
    if right.options.get("connector") == "jdbc":
        raise SqlError(line, "a jdbc table is joined as of a PROCTIME() column (a lookup join)")
    return "temporal"


def _bounds_time(sides: _Sides, on: list[exp.Expression], left: Table, right: Table) -> bool:
    """Whether a conjunct compares the two rowtimes (Flink's interval join)."""
    if left.watermark is None or right.watermark is None:
        return False
    times = {("L", left.watermark[0]), ("R", right.watermark[0])}
    for part in on:
        if isinstance(part, exp.EQ | exp.NEQ):
            continue
        columns = {(sides.side_of(c), c.name) for c in part.find_all(exp.Column)}
        if times <= columns:
            return True
    return False


def _select_list(line: int, query: exp.Select, sides: _Sides, outputs: list[str] | None) -> str:
    items: list[tuple[str, exp.Expression]] = []
    for item in query.expressions:
        star = item if isinstance(item, exp.Star) else item.this if isinstance(item, exp.Column) \
            and isinstance(item.this, exp.Star) else None  # fmt: skip
        if star is not None:
            qualifier = item.table.lower() if isinstance(item, exp.Column) else ""
            chosen = [sides.names[qualifier]] if qualifier else list(sides.visible)
            for side in chosen:
                for name in sides.tables[side].columns():
                    items.append((name, _column_of(side, sides.tables[side].stored(name))))
            continue
        inner = item.this if isinstance(item, exp.Alias) else item
        refused = unsupported(inner)
        if refused is not None:
            raise SqlError(line, f"{describe(refused)} is not supported in the select list")
        name = item.alias_or_name if isinstance(item, exp.Alias | exp.Column) else ""
        items.append((name, sides.rewrite(inner)))
    if outputs is not None:
        if len(outputs) != len(items):
            raise SqlError(line, f"the SELECT gives {len(items)} columns, the output table has "
                           f"{len(outputs)}")  # fmt: skip
        items = [(name, expression) for name, (_, expression) in zip(outputs, items, strict=True)]
    return ", ".join(
        expression.sql(FLINK_LEXICON) + (f" AS {_identifier(name)}" if name else "")
        for name, expression in items
    )


def _subquery_join(line: int, query: exp.Select, tables: dict[str, Table], left: Table,
                   left_alias: str, where: list[exp.Expression],
                   outputs: list[str] | None) -> tuple[JoinQuery, Table, Table]:  # fmt: skip
    """`WHERE x IN (SELECT …)` / `EXISTS (…)`: a semi join; negated, an anti join."""
    found = [p for p in where if isinstance(p.unnest(), exp.In | exp.Exists | exp.Not)
             and p.find(exp.Subquery, exp.Exists)]  # fmt: skip
    if len(found) != 1:
        raise SqlError(line, "a SELECT from one table: a join, IN (SELECT …) or EXISTS (…) "
                       "is needed")  # fmt: skip
    part = found[0].unnest()
    negated = isinstance(part, exp.Not)
    part = part.this.unnest() if negated else part
    rest = [p for p in where if p is not found[0]]
    if negated and rest:
        raise SqlError(line, "NOT IN / NOT EXISTS beside other conditions in WHERE is not "
                       "supported")  # fmt: skip
    inner = part.this if isinstance(part, exp.Exists) else part.args.get("query")
    inner = inner.this if isinstance(inner, exp.Subquery) else inner
    if not isinstance(inner, exp.Select) or inner.args.get("joins"):
        raise SqlError(line, "the subquery must be a SELECT from one table")
    _refuse_clauses(line, inner)
    inner_from = inner.args.get("from_") or inner.args.get("from")
    right, right_alias = _table_of(line, inner_from.this, tables)
    sides = _Sides(line, left, right, {left_alias, left.name}, {right_alias, right.name})
    within = sides.inner()
    sides.visible = "L"  # the subquery's table is not the outer query's
    on = [within.rewrite(p) for p in
          _conjuncts(inner.args["where"].this if inner.args.get("where") else None)]  # fmt: skip
    if isinstance(part, exp.In):
        if len(inner.expressions) != 1 or not isinstance(part.this, exp.Column):
            raise SqlError(line, "IN (SELECT …) compares one column with one column")
        [selected] = inner.expressions
        outer, chosen = sides.rewrite(part.this), within.rewrite(selected)
        equal: exp.Expression = exp.EQ(this=outer, expression=chosen)
        pairs = ((part.this, sides.side_of(part.this)), (selected, within.side_of(selected)))
        nullable = [c for c, side in pairs if c.name not in sides.tables[side].not_null]
        if negated and nullable:
            # Flink's NOT IN is null-aware (Calcite: `(a = d) IS NOT FALSE` under the anti
            # join): a NULL on either side matches, so no left row passes a right NULL
            checks = [exp.Is(this=c, expression=exp.Null()) for c in (outer, chosen)]
            equal = exp.or_(equal, *checks)
        on.insert(0, equal)
    if not on:
        raise SqlError(line, "the subquery needs a condition on the outer table")
    condition = _and(on + [sides.rewrite(p) for p in rest])
    assert condition is not None
    select = _select_list(line, query, sides, outputs)
    kind = "anti" if negated else "semi"
    return JoinQuery("regular", kind, left.name, right.name, condition.sql(FLINK_LEXICON),
                     select), left, right  # fmt: skip


# --- the script ----------------------------------------------------------------------------

_SET = re.compile(r"^SET\s+('(?:[^']|'')*'|[\w.-]+)\s*=\s*('(?:[^']|'')*'|\S+)$", re.I | re.S)


def _set(line: int, statement: str, out: Compiled) -> None:
    match = _SET.match(statement)
    if match is None:
        raise SqlError(line, "SET is written SET 'key' = 'value'")
    key, value = (_string(v) if v.startswith("'") else v for v in (match[1], match[2]))
    if key == "table.exec.state.ttl":
        out.set("STATE_TTL", _duration(value), line)
    elif key == "table.local-time-zone":
        if value.upper() not in ("UTC", "Z", "GMT", "+00:00"):
            raise SqlError(line, f"'table.local-time-zone' {value!r}: streamjoin's session is UTC")
    else:
        raise SqlError(line, f"SET '{key}' is not supported (table.exec.state.ttl, "
                       "table.local-time-zone)")  # fmt: skip


_WINDOW_TVF = re.compile(r"\bTABLE\s*\(\s*(TUMBLE|HOP|CUMULATE|SESSION)\s*\(", re.I)


def _time_of(table: Table, join_type: str, side: str) -> str:
    """The time attribute a side is read with for `join_type`."""
    if side == "LEFT" and join_type in ("temporal-proctime", "lookup"):
        return "proctime"
    return table.watermark[0] if table.watermark else "proctime"


def compile_script(text: str) -> Compiled:
    """The variables a Flink SQL script stands for, or `SqlError` naming the line."""
    out, tables, insert = Compiled(), {}, None
    last = 1
    for line, statement in statements(text):
        last = line
        words = statement.split()
        head = words[0].upper()
        if head == "SET":
            _set(line, statement, out)
        elif _CREATE.match(statement):
            table = create_table(line, statement)
            tables[table.name] = table
        elif head == "INSERT":
            if insert is not None:
                raise SqlError(line, "a second INSERT: streamjoin runs one join per deployment")
            insert = (line, statement)
        elif head == "SELECT":
            raise SqlError(line, "a SELECT alone writes nowhere: INSERT INTO <output table> "
                           "SELECT …")  # fmt: skip
        else:
            raise SqlError(line, f"{' '.join(words[:3])} … is not supported (SET, CREATE "
                           "TABLE, INSERT INTO)")  # fmt: skip
    if insert is None:
        raise SqlError(last, "no INSERT INTO <output table> SELECT … JOIN …")
    line, statement = insert
    window = _WINDOW_TVF.search(statement)
    if window is not None:
        raise SqlError(line + statement[: window.start()].count("\n"),
                       f"the window function {window[1].upper()} is not supported")  # fmt: skip
    try:
        tree = sqlglot.parse_one(statement, read=FLINK_LEXICON)
    except ParseError as err:
        first = err.errors[0] if err.errors else {"line": 1, "description": str(err)}
        raise SqlError(line + (first.get("line") or 1) - 1, first["description"]) from None
    if not isinstance(tree, exp.Insert) or not isinstance(tree.this, exp.Table):
        raise SqlError(line, "INSERT INTO <output table> SELECT … (no column list)")
    output = tables.get(tree.this.name)
    if output is None:
        raise SqlError(line, f"no table {tree.this.name} to insert into (CREATE TABLE it first)")
    query, left, right = compile_query(line, tree.expression, tables, output.columns())
    input_table(left, "LEFT", out, _time_of(left, query.type, "LEFT"))
    if query.type == "lookup":
        jdbc_table(right, out)
    elif right.options.get("connector") == "jdbc":
        raise SqlError(line, f"{right.name} is a jdbc table: join it FOR SYSTEM_TIME AS OF a "
                       "PROCTIME() column of the left (a lookup join)")  # fmt: skip
    else:
        input_table(right, "RIGHT", out, _time_of(right, query.type, "RIGHT"))
    output_table(output, out)
    if query.type != "regular":  # Flink's TTL for every operator; the others' is their time
        out.variables.pop("STATE_TTL", None)
        out.lines.pop("STATE_TTL", None)
    for name, value in (("JOIN_TYPE", query.type), ("JOIN_KIND", query.kind),
                        ("JOIN_ON", query.on), ("JOIN_SELECT", query.select)):  # fmt: skip
        out.set(name, value, line)
    return out
