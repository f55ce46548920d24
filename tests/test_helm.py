"""The Helm chart lints, renders and validates against Kubernetes' schemas, offline."""

from __future__ import annotations

from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from app.config.env import load_config
from app.demo import SCRIPT
from tests.alerting import CHART, RUNBOOKS_URL

SCALE_OUT = yaml.safe_load((CHART / "values-scale-out.yaml").read_text())
KUBERNETES = "1.30"


def rendered(values: dict | None) -> dict[str, dict]:
    """Every manifest of the chart by `Kind/name`."""
    manifests = {}
    for text in helm.Chart.load(CHART).render(values, name="sj", namespace="stream").values():
        for doc in yaml.safe_load_all(text):
            if doc:
                manifests[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return manifests


MONITORED = {
    "alerts": {"enabled": True, "runbookUrl": RUNBOOKS_URL},
    "metrics": {"port": 9464, "serviceMonitor": {"enabled": True}},
}


@pytest.mark.parametrize(
    "values",
    [None, SCALE_OUT, {"sql": SCRIPT}, MONITORED],
    ids=["default", "scale-out", "sql", "monitored"],
)
def test_the_chart_lints_and_every_manifest_validates(values: dict | None) -> None:
    report = helm.lint(CHART, values, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    for name, manifest in rendered(values).items():
        if manifest["kind"] in ("ServiceMonitor", "PrometheusRule"):  # CRDs: not Kubernetes'
            assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        kubernetes_validate.validate(manifest, KUBERNETES, strict=True)
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "streamjoin", name
        assert labels["app.kubernetes.io/instance"] == "sj", name


def test_default_values_run_one_local_driver_with_a_checkpoint_volume() -> None:
    manifests = rendered(None)
    pod = manifests["StatefulSet/sj-streamjoin"]["spec"]
    container = pod["template"]["spec"]["containers"][0]
    config = manifests["ConfigMap/sj-streamjoin"]["data"]
    assert pod["replicas"] == 1
    assert pod["volumeClaimTemplates"][0]["metadata"]["name"] == "checkpoint"
    assert config["CHECKPOINT_LOCATION"] == "/var/lib/streamjoin/checkpoint"
    assert config["OUTPUT_TRANSACTIONAL_ID"] == "streamjoin-stream-sj-streamjoin"
    assert config["SPARK_MASTER"] == "local[*]"
    assert config["JOIN_TYPE"] == "temporal" and config["METRICS_PORT"] == "9464"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["template"]["spec"]["enableServiceLinks"] is False
    assert pod["template"]["spec"]["terminationGracePeriodSeconds"] >= 300
    assert not any(k.startswith("Role") for k in manifests)


def test_scale_out_runs_executors_on_kubernetes_with_secrets_from_secrets() -> None:
    manifests = rendered(SCALE_OUT)
    config = manifests["ConfigMap/sj-streamjoin"]["data"]
    pod = manifests["StatefulSet/sj-streamjoin"]["spec"]
    container = pod["template"]["spec"]["containers"][0]
    assert config["SPARK_MASTER"] == "k8s://https://kubernetes.default.svc"
    assert config["SPARK_CONF_spark.executor.instances"] == "4"
    assert (
        config["SPARK_CONF_spark.driver.host"] == "sj-streamjoin-0.sj-streamjoin-driver.stream.svc"
    )
    assert config["CHECKPOINT_LOCATION"] == "/var/lib/streamjoin/checkpoint"
    assert "volumeClaimTemplates" not in pod
    assert config["SPARK_CONF_spark.authenticate"] == "true"
    assert config["SPARK_CONF_spark.network.crypto.enabled"] == "true"
    assert "Role/sj-streamjoin-spark-driver" in manifests
    assert "RoleBinding/sj-streamjoin-spark-driver" in manifests
    assert "ServiceMonitor/sj-streamjoin" in manifests
    secrets = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
    }
    assert secrets["KAFKA_SASL_PASSWORD"] == {"name": "kafka-credentials", "key": "password"}
    assert not any("PASSWORD" in k or "USER_INFO" in k for k in config)  # never a ConfigMap


def test_executors_start_from_a_pod_template_as_hardened_as_the_driver() -> None:
    manifests = rendered(SCALE_OUT)
    config = manifests["ConfigMap/sj-streamjoin"]["data"]
    driver = manifests["StatefulSet/sj-streamjoin"]["spec"]["template"]["spec"]
    template = yaml.safe_load(manifests["ConfigMap/sj-streamjoin-executor"]["data"]["pod.yaml"])
    kubernetes_validate.validate(template, KUBERNETES, strict=True)
    executor = template["spec"]["containers"][0]
    mounted = {m["mountPath"] for m in driver["containers"][0]["volumeMounts"]}
    assert mounted >= {"/etc/streamjoin/executor", "/tmp", "/var/lib/streamjoin/checkpoint"}
    assert config["SPARK_CONF_spark.kubernetes.executor.podTemplateFile"] == (
        "/etc/streamjoin/executor/pod.yaml"
    )
    assert (
        executor["name"] == config["SPARK_CONF_spark.kubernetes.executor.podTemplateContainerName"]
    )
    assert template["spec"]["securityContext"] == driver["securityContext"]
    assert executor["securityContext"] == driver["containers"][0]["securityContext"]
    assert template["spec"]["automountServiceAccountToken"] is False
    claims = {v["name"]: v for v in template["spec"]["volumes"]}
    assert claims["checkpoint"]["persistentVolumeClaim"]["claimName"] == "streamjoin-checkpoints"
    assert {m["mountPath"] for m in executor["volumeMounts"]} == {
        "/tmp",
        "/var/lib/streamjoin/checkpoint",
        "/etc/streamjoin/tls",
    }
    role = manifests["Role/sj-streamjoin-spark-driver"]["rules"]
    assert {r for rule in role for r in rule["resources"]} == {"pods", "configmaps"}


def test_scale_out_without_a_shared_checkpoint_claim_is_refused() -> None:
    values = {**SCALE_OUT, "checkpoint": {}}
    with pytest.raises(helm.HelmRenderError, match=r"needs checkpoint\.existingClaim"):
        rendered(values)


def test_a_checkpoint_on_an_object_store_mounts_no_claim_on_any_pod() -> None:
    values = {**SCALE_OUT, "checkpoint": {"location": "s3a://streams/orders-enriched"}}
    manifests = rendered(values)
    assert manifests["ConfigMap/sj-streamjoin"]["data"]["CHECKPOINT_LOCATION"] == (
        "s3a://streams/orders-enriched"
    )
    pod = manifests["StatefulSet/sj-streamjoin"]["spec"]
    assert "volumeClaimTemplates" not in pod
    executor = yaml.safe_load(manifests["ConfigMap/sj-streamjoin-executor"]["data"]["pod.yaml"])
    for spec in (pod["template"]["spec"], executor["spec"]):
        assert "checkpoint" not in {v["name"] for v in spec["volumes"]}
        assert "checkpoint" not in {m["name"] for m in spec["containers"][0]["volumeMounts"]}


@pytest.mark.parametrize(
    "values",
    [
        {"metrics": {"port": "http"}},
        {"checkpoint": {"uri": "s3a://bucket/checkpoint"}},  # not a value: `location` is
        {"checkpoint": {"location": "gs://bucket/checkpoint"}},  # no gs:// filesystem
        {"config": {"JOIN_KIND": "sideways"}},
        {"config": {"OUTPUT_DELIVERY": "twice"}},
        {"config": {"CHECKPOINT_LOCATION": "/data"}},
        {"sparkOnKubernetes": {"executor": {"memory": "lots"}}},
        {"replicas": 3},
        {"readinessTimeout": "600"},  # a bare number: a unit is required
        # a secret belongs in secretEnv (a Secret), never in the ConfigMap
        {"config": {"KAFKA_SASL_PASSWORD": "hunter2"}},
        {"config": {"KAFKA_sasl.jaas.config": "org.apache.kafka..."}},
        {"config": {"SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "u:p"}},
    ],
)
def test_a_wrong_value_fails_at_install_time(values: dict) -> None:
    chart = helm.Chart.load(CHART)
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(chart.merge_values(values))


def test_a_job_given_as_flink_sql_is_mounted_and_is_what_the_pod_runs(tmp_path: Path) -> None:
    script = SCRIPT.format(suffix="")
    manifests = rendered({"sql": script})
    config = manifests["ConfigMap/sj-streamjoin"]["data"]
    pod = manifests["StatefulSet/sj-streamjoin"]["spec"]["template"]
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert manifests["ConfigMap/sj-streamjoin-sql"]["data"] == {"job.sql": script}
    assert volumes["sql"]["configMap"]["name"] == "sj-streamjoin-sql"
    assert config["STREAMJOIN_SQL_FILE"] == mounts["sql"] + "/job.sql"
    # the example join's variables give way to the SQL; the operational ones stay
    assert not any(name.startswith(("LEFT_", "RIGHT_", "JOIN_")) for name in config)
    assert config["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    (tmp_path / "job.sql").write_text(script)
    job = load_config(config | {"STREAMJOIN_SQL_FILE": str(tmp_path / "job.sql")})
    assert (job.join.type, job.join.kind, job.output.topic) == (
        "temporal",
        "left",
        "orders_enriched",
    )
