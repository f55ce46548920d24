"""No secret value in what Spark prints of a query: plans, and the errors that carry them."""

from __future__ import annotations

import pytest

from app.config.env import ConfigError, load_config
from app.config.redaction import MASK, shown_variables, without_user_info
from serdes.kafka.datasource import NAME, kafka_options

SECRETS = {
    "sasl.password": "hunter2",
    "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule jaas-pw",
    "sasl.oauthbearer.client.secret": "oauth-value",
    "ssl.key.pem": "MIIEvQIBADANBg",
    "ssl.key.password": "keypw-7",
    "ssl.keystore.password": "kspw-9",
    "basic.auth.user.info": "alice:wonderland",
}


@pytest.mark.spark
def test_a_query_plan_masks_every_secret_bearing_client_property(spark) -> None:
    """The Kafka clients' properties travel as data source options, which Spark prints in
    plans (and in the plan dump of a failing start): Spark's default redaction misses
    `ssl.key.pem`, `sasl.jaas.config` and `basic.auth.user.info`; the service's does not."""
    options = kafka_options({"bootstrap.servers": "127.0.0.1:9", **SECRETS})
    stream = spark.readStream.format(NAME).option("topic", "t").options(**options).load()
    plan = stream._jdf.queryExecution().toString()
    assert "kafka.bootstrap.servers=127.0.0.1:9" in plan  # options are printed...
    assert [v for v in SECRETS.values() if v in plan] == []  # ... but no secret's value


def test_printed_configuration_masks_secrets_and_a_urls_user_info() -> None:
    shown = shown_variables(
        {
            "KAFKA_SASL_PASSWORD": "hunter2",
            "KAFKA_sasl.jaas.config": "jaas-pw",
            "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "alice:wonderland",
            "SCHEMA_REGISTRY_URL": "https://alice:wonderland@registry:8081/x",
            "KAFKA_SSL_KEY_PEM": "MIIE",
            "LEFT_TOPIC": "orders",
            "HOME": "/root",
        },
        {"LEFT_TOPIC", "SCHEMA_REGISTRY_URL"},
    )
    assert shown == {
        "KAFKA_SASL_PASSWORD": MASK,
        "KAFKA_SSL_KEY_PEM": MASK,
        "KAFKA_sasl.jaas.config": MASK,
        "LEFT_TOPIC": "orders",
        "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": MASK,
        "SCHEMA_REGISTRY_URL": f"https://{MASK}@registry:8081/x",
    }
    assert without_user_info("http://registry:8081") == "http://registry:8081"


def test_a_refused_value_is_quoted_without_the_secret_it_carries() -> None:
    """A registry URL with credentials that is refused is quoted without them."""
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "b:9092",
        "LEFT_TOPIC": "l",
        "RIGHT_TOPIC": "r",
        "OUTPUT_TOPIC": "o",
        "CHECKPOINT_LOCATION": "/tmp/ck",
        "SCHEMA_REGISTRY_URL": "ftp://alice:wonderland@registry:8081",
    }
    with pytest.raises(ConfigError) as caught:
        load_config(env)
    assert str(caught.value).startswith("SCHEMA_REGISTRY_URL: expected an http(s):// URL")
    assert "wonderland" not in str(caught.value)
