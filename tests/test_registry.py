"""The registry of variables is the one home of their facts: what the users read (the docs'
tables, `--help`), what the Helm chart accepts, what is masked and what the Flink SQL front-end
maps all agree with it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from app.config.redaction import SECRET_NAMES, is_secret
from app.config.registry import INPUT_FORMATS, PROPERTY_PREFIXES, VARIABLES
from app.config.sql.ddl import _LOOKUP_OPTIONS
from app.run.inputs import DECODERS

ROOT = Path(__file__).parent.parent


def _table_names(page: str) -> set[str]:
    """The variables named in the first column of a page's tables (patterns like
    `KAFKA_<PROPERTY>` and properties spelled as written left out)."""
    names = set()
    for line in (ROOT / "docs" / page).read_text().splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names |= {n for n in re.findall(r"`([A-Z][A-Z0-9_]*)`", first)}
    return names


def test_the_docs_tables_list_every_variable_and_only_those() -> None:
    documented = _table_names("configuration.md") | _table_names("joins.md")
    assert documented == set(VARIABLES)


def test_the_docs_list_every_input_format() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    listed = re.findall(r"^\| `([a-z-]+)` \| ", text, re.M)
    assert listed == list(INPUT_FORMATS)


def test_the_helm_values_schema_takes_what_the_registry_takes() -> None:
    schema = json.loads((ROOT / "helm" / "streamjoin" / "values.schema.json").read_text())
    config = schema["properties"]["config"]
    for name, rule in config["properties"].items():
        assert name in VARIABLES, name
        if "enum" in rule:
            assert tuple(rule["enum"]) == VARIABLES[name].choices, name
    enumerated = {name for name, rule in config["properties"].items() if "enum" in rule}
    chosen = {
        v.name
        for v in VARIABLES.values()
        if v.choices and not v.name.startswith(("LOOKUP_", "LOG_LEVEL"))
    }
    assert enumerated == chosen
    assert set(config["required"]) <= {v.name for v in VARIABLES.values() if v.required}


def test_a_variable_is_masked_exactly_when_its_name_looks_secret() -> None:
    """The chart refuses secret-looking names in its ConfigMap by the same pattern, so a secret
    variable whose name did not look secret would land in a ConfigMap unmasked."""
    for variable in VARIABLES.values():
        assert variable.secret == bool(re.search(SECRET_NAMES, variable.name)), variable.name
        assert is_secret(variable.name) == variable.secret
    assert is_secret("KAFKA_SASL_PASSWORD") and not is_secret("KAFKA_SASL_MECHANISM")
    assert all(
        not name.startswith(PROPERTY_PREFIXES)
        for name in VARIABLES
        if name
        not in (
            "KAFKA_BOOTSTRAP_SERVERS",
            "KAFKA_GROUP_ID",
            "KAFKA_AUTO_OFFSET_RESET",
            "SCHEMA_REGISTRY_URL",
        )
    )


def test_every_input_format_has_a_decoder_and_every_lookup_option_a_variable() -> None:
    assert tuple(DECODERS) == INPUT_FORMATS
    lookup_options = {(v.flink or "").split(",")[0].strip("'") for v in VARIABLES.values()}
    assert {o for o in lookup_options if o.startswith("lookup.")} == set(_LOOKUP_OPTIONS)


def test_help_lists_every_variable() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "app.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert all(f"  {name}: " in shown for name in VARIABLES)
