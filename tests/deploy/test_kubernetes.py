"""The Kubernetes manifests: valid against the API's schemas, hardened, and consistent, offline.

kubernetes-validate checks every manifest against the OpenAPI schemas of the oldest supported and
the newest Kubernetes release (strictly: an unknown field is an error). The ServiceMonitor is a
CRD those schemas do not cover, so its shape is checked here. ``kubectl kustomize`` renders the
kustomization as ``kubectl apply -k`` would, and the rendered ConfigMaps' embedded config and
policy are loaded by Manifold's own loaders. The rest ties the pieces together: probes, ports,
secrets, selectors, writable paths.
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Final, NoReturn, cast

import pytest
import yaml

from proxy.auth.authenticator import Authenticator
from proxy.config.loading import config_from_mapping, load_config
from proxy.config.model import Config
from proxy.config.policy_files import load_policy
from proxy.inbound.observers import Observers, metrics_require_auth
from proxy.inbound.streamable_http import OriginPolicy
from proxy.policy.loader import document_from_mapping
from tests.deploy.promql import DEPLOY
from tests.deploy.test_dockerfile import BY_NAME

pytestmark = pytest.mark.slow

KUBERNETES: Final = DEPLOY / "kubernetes"
KUSTOMIZATION: Final = KUBERNETES / "kustomization.yaml"
SERVICE_MONITOR: Final = KUBERNETES / "components" / "servicemonitor" / "servicemonitor.yaml"
EXAMPLES: Final = (KUBERNETES / "secret.example.yaml", KUBERNETES / "ingress.example.yaml")
# The oldest release deploy/README.md promises, and whatever the validator knows as the newest.
OLDEST: Final = "1.27.0"
KUBERNETES_VALIDATE_INSTALL: Final = "pip install kubernetes-validate  (it bundles the API schemas)"
KUBECTL_INSTALL: Final = "kubectl >= 1.27 from your platform's packages (its kustomize renders the manifests)"

Resource = dict[str, Any]
Validate = Callable[..., str]


def _missing(tool: str, install: str) -> NoReturn:
    """A failure in CI (the test extras install every validator), a skip elsewhere."""
    message = f"{tool} is not installed; install it with: {install}"
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"CI is set and {message}", pytrace=False)
    pytest.skip(message)


@functools.cache
def _parsed(path: Path) -> tuple[Resource, ...]:
    return tuple(document for document in yaml.safe_load_all(path.read_text()) if document)


def load_all(path: Path) -> list[Resource]:
    """The documents of a YAML file: fresh copies, free to change (parsed once)."""
    return copy.deepcopy(list(_parsed(path)))


def kustomization() -> Resource:
    loaded: Resource = yaml.safe_load(KUSTOMIZATION.read_text())
    return loaded


def resources() -> list[Resource]:
    """The resources kustomization.yaml lists, as written (before kustomize's transformations)."""
    return [document for name in kustomization()["resources"] for document in load_all(KUBERNETES / name)]


def find(kind: str, name: str, documents: list[Resource] | None = None) -> Resource:
    found = [
        d
        for d in (resources() if documents is None else documents)
        if d["kind"] == kind and d["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"{kind}/{name}: found {len(found)}"
    return found[0]


def manifold_container(deployment: Resource | None = None) -> Resource:
    spec = (deployment or find("Deployment", "manifold"))["spec"]["template"]["spec"]
    containers: list[Resource] = [c for c in spec["containers"] if c["name"] == "manifold"]
    assert len(containers) == 1
    return containers[0]


def generator(name: str) -> Resource:
    found: list[Resource] = [g for g in kustomization()["configMapGenerator"] if g["name"] == name]
    assert len(found) == 1, name
    return found[0]


def generated_files(name: str) -> dict[str, Path]:
    """ConfigMap key -> source file, for a configMapGenerator of kustomization.yaml."""
    files: dict[str, Path] = {}
    for entry in generator(name)["files"]:
        key, _, source = entry.rpartition("=")
        files[key or PurePosixPath(source).name] = KUBERNETES / source
    return files


def secret_environment() -> dict[str, str]:
    """The pod's environment with made-up values in place of the Secret's."""
    values = {
        "api-key-ci": "ci-key-" + "k" * 32,
        "api-key-prometheus": "prometheus-key-" + "p" * 32,
        "jwt-secret": "s" * 48,
        "redis-url": "redis://redis:6379/0",
        "search-mcp-token": "token",
        "session-secret": "s" * 48,
    }
    environ = {}
    for variable in manifold_container().get("env", []):
        reference = variable["valueFrom"]["secretKeyRef"]
        environ[variable["name"]] = values[reference["key"]]
    return environ


@functools.cache
def config() -> Config:
    return load_config(generated_files("manifold-config")["manifold.yaml"], environ=secret_environment())


def variables_read(value: Any) -> set[str]:
    """The environment variables a config needs: ``${VAR}`` without a default, and ``env:VAR`` keys."""
    if isinstance(value, dict):
        return {name for item in value.values() for name in variables_read(item)}
    if isinstance(value, list):
        return {name for item in value for name in variables_read(item)}
    if isinstance(value, str):
        return set(re.findall(r"(?<!\$)\$\{(\w+)\}", value)) | set(re.findall(r"^env:(\w+)$", value))
    return set()


def walk_keys(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}"
            yield from walk_keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from walk_keys(item, f"{path}[]")


# ---- validators ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def validate() -> Validate:
    try:
        module = importlib.import_module("kubernetes_validate")
    except ImportError:
        _missing("kubernetes-validate", KUBERNETES_VALIDATE_INSTALL)
    return cast(Validate, module.validate)


@pytest.fixture(scope="module")
def newest() -> str:
    try:
        module = importlib.import_module("kubernetes_validate")
    except ImportError:
        _missing("kubernetes-validate", KUBERNETES_VALIDATE_INSTALL)
    return cast(str, module.latest_version())


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        _missing("kubectl", KUBECTL_INSTALL)
    return path


def render(kubectl: str, directory: Path) -> list[Resource]:
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


@pytest.fixture(scope="module")
def rendered(kubectl: str) -> list[Resource]:
    return render(kubectl, KUBERNETES)


# ---- schemas ------------------------------------------------------------------------------------

MANIFESTS: Final = [
    *(KUBERNETES / name for name in kustomization()["resources"]),
    *EXAMPLES,
]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_is_valid_for_the_oldest_and_newest_kubernetes(
    path: Path, validate: Validate, newest: str
) -> None:
    for document in load_all(path):
        for version in (OLDEST, newest):
            validate(document, version, strict=True)


def test_the_validator_rejects_a_misspelt_field(validate: Validate, newest: str) -> None:
    # Guards the test above: strict validation must refuse what Kubernetes would silently drop.
    deployment = find("Deployment", "manifold")
    manifold_container(deployment)["securityContext"]["readOnlyRootFilesytem"] = True
    with pytest.raises(Exception, match="readOnlyRootFilesytem"):
        validate(deployment, newest, strict=True)


# Fields of monitoring.coreos.com/v1 ServiceMonitor (Prometheus Operator) that this file may use.
_SERVICE_MONITOR_FIELDS: Final = {
    ".apiVersion", ".kind", ".metadata", ".metadata.name", ".metadata.labels", ".spec",
    ".spec.jobLabel", ".spec.selector", ".spec.selector.matchLabels", ".spec.namespaceSelector",
    ".spec.endpoints", ".spec.endpoints[].port", ".spec.endpoints[].path", ".spec.endpoints[].interval",
    ".spec.endpoints[].scrapeTimeout", ".spec.endpoints[].scheme", ".spec.endpoints[].honorLabels",
    ".spec.endpoints[].relabelings", ".spec.endpoints[].metricRelabelings",
    ".spec.endpoints[].authorization", ".spec.endpoints[].authorization.type",
    ".spec.endpoints[].authorization.credentials", ".spec.endpoints[].authorization.credentials.name",
    ".spec.endpoints[].authorization.credentials.key",
}  # fmt: skip


def test_the_service_monitor_is_well_formed_and_scrapes_the_metrics_port() -> None:
    (monitor,) = load_all(SERVICE_MONITOR)
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    unknown = {key for key in walk_keys(monitor) if not key.startswith(".metadata.labels.")}
    unknown -= {key for key in unknown if key.startswith(".spec.selector.matchLabels.")}
    assert unknown <= _SERVICE_MONITOR_FIELDS, unknown - _SERVICE_MONITOR_FIELDS
    service = find("Service", "manifold")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels[monitor["spec"]["jobLabel"]] == "manifold"  # the alerts' job="manifold"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == config().metrics.path
    assert re.fullmatch(r"\d+s", endpoint["interval"])
    component = yaml.safe_load((SERVICE_MONITOR.parent / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    assert component["resources"] == [SERVICE_MONITOR.name]


def test_the_example_secret_is_not_applied_with_the_kustomization() -> None:
    assert all(d["kind"] != "Secret" for d in resources())
    assert not kustomization().get("secretGenerator")


# ---- the Deployment ---------------------------------------------------------------------------------


def test_at_least_two_replicas_run_and_the_autoscaler_keeps_it_so() -> None:
    assert find("Deployment", "manifold")["spec"]["replicas"] >= 2
    hpa = find("HorizontalPodAutoscaler", "manifold")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "manifold",
    }
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]


def test_a_rollout_or_a_drain_never_takes_every_replica() -> None:
    deployment = find("Deployment", "manifold")
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = find("PodDisruptionBudget", "manifold")
    assert pdb["spec"]["maxUnavailable"] == 1
    pods = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pods.items()


def test_the_pods_run_unprivileged_on_a_read_only_root() -> None:
    deployment = find("Deployment", "manifold")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    context = manifold_container(deployment)["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}


def test_the_pods_run_as_the_images_user_with_the_images_command() -> None:
    pod = find("Deployment", "manifold")["spec"]["template"]["spec"]
    runtime = BY_NAME["runtime"]
    user, group = runtime.last("USER").arguments.split(":")
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        int(user),
        int(group),
    )
    assert manifold_container()["args"] == runtime.last("CMD").exec_form()
    assert "command" not in manifold_container()  # keep the image's dumb-init entrypoint


def test_liveness_asks_healthz_and_readiness_asks_readyz() -> None:
    container = manifold_container()
    port = config().listen.port
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert ports[get["port"]] == port, probe


def test_the_kubelet_probing_the_pod_ip_passes_the_host_check_and_a_rebound_name_does_not() -> None:
    # httpGet without `host` or a Host header: the kubelet sends Host: <pod IP>:<port>.
    container = manifold_container()
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert "host" not in container[probe]["httpGet"], probe
        assert "httpHeaders" not in container[probe]["httpGet"], probe
    observers = _observers()
    port = config().listen.port
    assert observers.admitted({"host": f"10.244.1.17:{port}"}) is None
    assert observers.admitted({"host": f"[fd00:10:244::11]:{port}"}) is None
    refused = observers.admitted({"host": f"attacker.example:{port}"})
    assert refused is not None
    assert refused.status == 403


def _observers() -> Observers:
    loaded = config()
    listen = loaded.listen
    return Observers(
        Authenticator.from_settings(loaded.auth, secret_environment()),
        OriginPolicy(listen.host, listen.allowed_origins, listen.allowed_hosts),
        loaded.metrics,
        require_auth=metrics_require_auth(loaded),
    )


def test_the_service_monitor_scrapes_with_a_key_that_holds_the_metrics_role() -> None:
    loaded = config()
    assert metrics_require_auth(loaded)  # credentials are configured: /metrics needs one
    (monitor,) = load_all(SERVICE_MONITOR)
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["authorization"]["type"] == "Bearer"
    credentials = endpoint["authorization"]["credentials"]
    (secret,) = load_all(KUBERNETES / "secret.example.yaml")
    assert credentials["name"] == secret["metadata"]["name"]
    assert credentials["key"] in secret["stringData"]
    (variable,) = [
        v["name"]
        for v in manifold_container().get("env", [])
        if v["valueFrom"]["secretKeyRef"]["key"] == credentials["key"]
    ]
    (key,) = [k for k in loaded.auth.api_keys if k.key == f"env:{variable}"]
    assert loaded.metrics.role in key.roles


def test_requests_and_limits_are_set_for_cpu_and_memory() -> None:
    for deployment in ("manifold", "redis"):
        for container in find("Deployment", deployment)["spec"]["template"]["spec"]["containers"]:
            assert set(container["resources"]["requests"]) == {"cpu", "memory"}, deployment
            assert set(container["resources"]["limits"]) == {"cpu", "memory"}, deployment


def test_the_writable_paths_are_empty_dirs() -> None:
    deployment = find("Deployment", "manifold")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {PurePosixPath(m["mountPath"]): m for m in manifold_container(deployment)["volumeMounts"]}
    writable = {path for path, mount in mounts.items() if "emptyDir" in volumes[mount["name"]]}
    assert PurePosixPath("/tmp") in writable
    pins = PurePosixPath(config().policy.pins.path)
    assert pins.parent in writable, f"policy.pins.path {pins} is not on an emptyDir"
    home = BY_NAME["runtime"].last("ENV").arguments
    assert "HOME=/var/lib/manifold" in home.split()
    assert PurePosixPath("/var/lib/manifold") in writable


def test_config_and_policies_are_one_projected_directory_that_follows_updates() -> None:
    deployment = find("Deployment", "manifold")
    (mount,) = [
        m for m in manifold_container(deployment)["volumeMounts"] if m["mountPath"] == "/etc/manifold"
    ]
    assert mount["readOnly"] is True
    assert "subPath" not in mount
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    sources = [s["configMap"]["name"] for s in volumes[mount["name"]]["projected"]["sources"]]
    assert sources == ["manifold-config", "manifold-policies"]
    assert not generator("manifold-config").get("options", {}).get("disableNameSuffixHash")
    assert generator("manifold-policies")["options"]["disableNameSuffixHash"] is True


def test_the_pod_annotations_tell_prometheus_where_the_metrics_are() -> None:
    deployment = find("Deployment", "manifold")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    metrics = config().metrics
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == metrics.path
    assert int(annotations["prometheus.io/port"]) == metrics.port
    ports = {p["name"]: p["containerPort"] for p in manifold_container(deployment)["ports"]}
    assert ports["metrics"] == metrics.port


# ---- config, policy and secrets -----------------------------------------------------------------


def test_the_config_is_a_valid_manifold_config_with_redis_rate_limits() -> None:
    loaded = config()
    assert loaded.listen.host == "0.0.0.0"
    assert loaded.rate_limits.backend == "redis"
    assert loaded.auth.api_keys
    assert loaded.auth.jwt
    assert loaded.policy.reload is True


def test_the_policy_is_valid_and_sits_next_to_the_config() -> None:
    # Both ConfigMaps land in /etc/manifold; in the repository both files are in config/.
    policies = generated_files("manifold-policies")
    (config_file,) = generated_files("manifold-config").values()
    assert config().policy.files == tuple(str(config_file.parent / key) for key in policies)
    for source in policies.values():
        document_from_mapping(yaml.safe_load(source.read_text()), source=str(source))
    assert load_policy(list(policies.values())).limits


def test_every_variable_the_config_reads_comes_from_the_secret() -> None:
    wanted = variables_read(yaml.safe_load(generated_files("manifold-config")["manifold.yaml"].read_text()))
    environment = {v["name"]: v for v in manifold_container().get("env", [])}
    assert wanted <= set(environment), wanted - set(environment)
    (secret,) = load_all(KUBERNETES / "secret.example.yaml")
    for variable in environment.values():
        reference = variable["valueFrom"]["secretKeyRef"]
        assert reference["name"] == secret["metadata"]["name"]
        assert reference["key"] in secret["stringData"], reference


def test_the_example_secrets_redis_url_names_the_redis_service() -> None:
    (secret,) = load_all(KUBERNETES / "secret.example.yaml")
    host = re.fullmatch(r"redis://([\w.-]+):(\d+)/\d+", secret["stringData"]["redis-url"])
    assert host is not None
    service = find("Service", host[1])
    assert int(host[2]) in {port["port"] for port in service["spec"]["ports"]}


def test_allowed_hosts_name_the_service_and_the_ingress() -> None:
    hosts = set(config().listen.allowed_hosts)
    namespace = kustomization()["namespace"]
    port = find("Service", "manifold")["spec"]["ports"][0]["port"]
    assert {f"manifold:{port}", f"manifold.{namespace}.svc:{port}"} <= hosts
    (ingress,) = load_all(KUBERNETES / "ingress.example.yaml")
    assert {rule["host"] for rule in ingress["spec"]["rules"]} <= hosts


def test_the_service_and_the_ingress_reach_the_pods() -> None:
    service = find("Service", "manifold")
    pods = find("Deployment", "manifold")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pods.items()
    container_ports = {p["name"] for p in manifold_container()["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports
    (ingress,) = load_all(KUBERNETES / "ingress.example.yaml")
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend == {"name": "manifold", "port": {"name": "http"}}


def test_the_ingress_keeps_a_client_on_one_replica_and_does_not_buffer_streams() -> None:
    (ingress,) = load_all(KUBERNETES / "ingress.example.yaml")
    annotations = ingress["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    # Not the session header (yet): initialize has none, so it cannot route a session home.
    assert annotations[prefix + "upstream-hash-by"] == "$http_mcp_session_id"
    assert annotations[prefix + "proxy-buffering"] == "off"
    assert int(annotations[prefix + "proxy-read-timeout"]) >= 3600


def test_redis_accepts_only_manifolds_pods() -> None:
    policy = find("NetworkPolicy", "redis")
    redis = find("Deployment", "redis")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= redis.items()
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    pods = find("Deployment", "manifold")["spec"]["template"]["metadata"]["labels"]
    assert peer["podSelector"]["matchLabels"].items() <= pods.items()


# ---- rendered by kustomize ------------------------------------------------------------------------


def test_kustomize_renders_valid_resources_in_one_namespace(
    rendered: list[Resource], validate: Validate, newest: str
) -> None:
    namespace = kustomization()["namespace"]
    for document in rendered:
        validate(document, newest, strict=True)
        if document["kind"] != "Namespace":
            assert document["metadata"]["namespace"] == namespace, document["metadata"]["name"]


def test_a_config_change_rolls_the_pods_and_a_policy_change_does_not(rendered: list[Resource]) -> None:
    maps = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "ConfigMap"}
    (config_map,) = [name for name in maps if name.startswith("manifold-config-")]
    assert "manifold-policies" in maps
    volumes = find("Deployment", "manifold", rendered)["spec"]["template"]["spec"]["volumes"]
    (projected,) = [v["projected"] for v in volumes if "projected" in v]
    assert [s["configMap"]["name"] for s in projected["sources"]] == [config_map, "manifold-policies"]


def test_the_rendered_config_maps_hold_a_valid_config_and_policy(rendered: list[Resource]) -> None:
    (config_map,) = [d for d in rendered if d["metadata"]["name"].startswith("manifold-config-")]
    loaded = config_from_mapping(
        yaml.safe_load(config_map["data"]["manifold.yaml"]),
        source="manifold-config",
        environ=secret_environment(),
    )
    policies = find("ConfigMap", "manifold-policies", rendered)["data"]
    assert {PurePosixPath(f).name for f in loaded.policy.files} == set(policies)
    for key, text in policies.items():
        document_from_mapping(yaml.safe_load(text), source=key)


def test_the_service_monitor_component_renders_into_the_namespace(
    kubectl: str, tmp_path: Path, validate: Validate, newest: str
) -> None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, copy)
    with_monitor = {**kustomization(), "components": ["components/servicemonitor"]}
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(with_monitor))
    documents = render(kubectl, copy)
    monitor = find("ServiceMonitor", "manifold", documents)
    assert monitor["metadata"]["namespace"] == kustomization()["namespace"]
    for document in documents:
        if document["kind"] != "ServiceMonitor":
            validate(document, newest, strict=True)
