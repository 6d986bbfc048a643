"""The trace pipeline of the deploy files, offline: Manifold → OpenTelemetry Collector → Tempo.

No collector or Tempo binary runs here. What can be checked without them is: the collector's
pipelines name only components it defines, it listens where Manifold exports (OTLP/HTTP, as the
OTEL_* variables Manifold is given resolve) and sends where the backend listens, Grafana reads
Tempo where Tempo serves, Prometheus keeps exemplars, and the Kubernetes component renders
valid resources that point Manifold at the collector's Service.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from proxy.tracing.settings import resolve
from tests.deploy.test_compose import SERVICES, host_path, interpolate, manifold_config
from tests.deploy.test_kubernetes import (  # the fixtures too: kubectl, the validator, the newest version
    KUBERNETES,
    Validate,
    find,
    kubectl,  # noqa: F401
    kustomization,
    load_all,
    newest,  # noqa: F401
    render,
    validate,  # noqa: F401
)

pytestmark = pytest.mark.slow

COLLECTOR_COMPONENT = KUBERNETES / "components" / "tracing"


def _pipelines_hold(config: dict[str, Any]) -> None:
    """Every component a pipeline names is defined, and the OTLP receiver takes gRPC and HTTP."""
    for pipeline in config["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            for name in pipeline.get(kind, []):
                assert name in config[kind], f"{kind}: {name} is used but not defined"
    for name in config["service"].get("extensions", []):
        assert name in config["extensions"]
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    assert protocols["http"]["endpoint"].endswith(":4318")


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def test_compose_manifold_exports_to_the_collector_which_sends_to_tempo() -> None:
    environ = {k: interpolate(str(v)) for k, v in SERVICES["manifold"]["environment"].items()}
    resolved = resolve(manifold_config().tracing, environ)
    assert resolved is not None, "the OTEL_* variables the stack passes switch tracing on"
    target = urlsplit(resolved.endpoint)
    assert (target.hostname, target.path) == ("otel-collector", "/v1/traces")
    collector = yaml.safe_load(host_path("otel-collector", "/etc/otelcol-contrib/config.yaml").read_text())
    _pipelines_hold(collector)
    assert target.port == _port(collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"])
    (exporter,) = collector["service"]["pipelines"]["traces"]["exporters"]
    host, port = collector["exporters"][exporter]["endpoint"].rsplit(":", 1)
    assert host in SERVICES
    tempo = yaml.safe_load(host_path(host, "/etc/tempo.yaml").read_text())
    assert int(port) == _port(tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])


def test_compose_grafana_reads_tempo_where_it_serves_and_prometheus_keeps_exemplars() -> None:
    tempo = yaml.safe_load(host_path("tempo", "/etc/tempo.yaml").read_text())
    datasource = yaml.safe_load(
        host_path("grafana", "/etc/grafana/provisioning/datasources/tempo.yaml").read_text()
    )["datasources"][0]
    url = urlsplit(datasource["url"])
    assert (url.hostname, url.port) == ("tempo", tempo["server"]["http_listen_port"])
    assert "--enable-feature=exemplar-storage" in SERVICES["prometheus"]["command"]


def test_the_kubernetes_collector_config_holds_and_probes_its_health_port() -> None:
    documents = load_all(COLLECTOR_COMPONENT / "otel-collector.yaml")
    config = yaml.safe_load(find("ConfigMap", "otel-collector", documents)["data"]["config.yaml"])
    _pipelines_hold(config)
    deployment = find("Deployment", "otel-collector", documents)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == _port(config["extensions"]["health_check"]["endpoint"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_tracing_component_renders_valid_resources_and_points_manifold_at_the_collector(
    kubectl: str,  # noqa: F811  # the fixtures imported above
    tmp_path: Path,
    validate: Validate,  # noqa: F811
    newest: str,  # noqa: F811
) -> None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, copy)
    (copy / "kustomization.yaml").write_text(
        yaml.safe_dump({**kustomization(), "components": ["components/tracing"]})
    )
    documents = render(kubectl, copy)
    for document in documents:
        validate(document, newest, strict=True)
        if document["kind"] != "Namespace":
            assert document["metadata"]["namespace"] == kustomization()["namespace"]
    manifold = find("Deployment", "manifold", documents)
    (container,) = manifold["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "SESSION_SECRET" in env  # the patch adds to the env, it does not replace it
    resolved = resolve(manifold_config().tracing, {k: v for k, v in env.items() if v is not None})
    assert resolved is not None
    target = urlsplit(resolved.endpoint)
    service = find("Service", "otel-collector", documents)
    assert target.hostname == service["metadata"]["name"]
    assert target.port in {p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-http"}
