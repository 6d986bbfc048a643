"""The compose stack: a valid Compose file whose every reference holds, offline.

No Docker engine runs here. The Compose Specification's JSON Schema (shipped in check-jsonschema)
checks the format; the tests below check what a schema cannot: every mounted file exists, every
dependency is a service with a health check, Manifold's config in the stack is valid, loads the
policy the stack mounts, starts servers the image contains and keeps its rate limits in the
stack's Redis, Prometheus loads the alert rules (promtool), and Grafana gets the dashboard.
Where a Docker Compose v2 CLI is at hand, ``docker compose config`` checks the file as well.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Final, NoReturn

import pytest
import yaml

from proxy.config.loading import config_from_mapping
from proxy.config.model import Config
from proxy.config.policy_files import load_policy
from tests.deploy.promql import DEPLOY, run
from tests.deploy.test_dockerfile import BY_NAME, copies

pytestmark = pytest.mark.slow

COMPOSE: Final = DEPLOY / "compose.yaml"
CHECK_JSONSCHEMA_INSTALL: Final = "pip install check-jsonschema  (it ships the Compose Specification schema)"
# What the stack needs in its environment (compose.yaml says so with ${VAR:?...}).
ENVIRONMENT: Final = {
    "DEMO_API_KEY": "a-long-random-demo-key-for-the-tests",
    "PROMETHEUS_API_KEY": "a-long-random-scrape-key-for-the-tests",
}


def _missing(tool: str, install: str) -> NoReturn:
    """A failure in CI (the test extras install every validator), a skip elsewhere."""
    message = f"{tool} is not installed; install it with: {install}"
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"CI is set and {message}", pytrace=False)
    pytest.skip(message)


def stack() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


STACK: Final = stack()
SERVICES: Final[dict[str, dict[str, Any]]] = STACK["services"]


def interpolate(value: str, environ: Mapping[str, str] = ENVIRONMENT) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, enough for this file."""

    def one(match: re.Match[str]) -> str:
        name, operator, word = match["name"], match["op"], match["word"]
        if environ.get(name):
            return environ[name]
        assert operator != ":?", f"{name} must be set: {word}"
        return word or ""

    return re.sub(r"\$\{(?P<name>\w+)(?:(?P<op>:-|:\?)(?P<word>[^}]*))?\}", one, value)


def bind_mounts(service: str) -> list[tuple[Path, PurePosixPath]]:
    """(host path, container path) of each bind mount of ``service`` (short syntax)."""
    mounts = []
    for volume in SERVICES[service].get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith((".", "/")):
            mounts.append(((COMPOSE.parent / source).resolve(), PurePosixPath(target)))
    return mounts


def named_volume_targets(service: str) -> list[PurePosixPath]:
    return [
        PurePosixPath(volume.split(":")[1])
        for volume in SERVICES[service].get("volumes", [])
        if not volume.startswith((".", "/"))
    ]


def host_path(service: str, container_path: str) -> Path:
    """The repository file that ``service`` sees at ``container_path``, through its bind mounts."""
    path = PurePosixPath(container_path)
    for source, target in bind_mounts(service):
        if path == target or target in path.parents:
            return source / path.relative_to(target)
    raise AssertionError(f"{service} has no bind mount that holds {container_path}")


def manifold_config() -> Config:
    path = host_path("manifold", "/etc/manifold/manifold.yaml")
    environ = {
        name: interpolate(str(value)) for name, value in SERVICES["manifold"].get("environment", {}).items()
    }
    return config_from_mapping(yaml.safe_load(path.read_text()), source=str(path), environ=environ)


def variables_read(value: Any) -> set[str]:
    """The environment variables a config needs: ``${VAR}`` without a default, and ``env:VAR`` keys."""
    if isinstance(value, dict):
        return {name for item in value.values() for name in variables_read(item)}
    if isinstance(value, list):
        return {name for item in value for name in variables_read(item)}
    if isinstance(value, str):
        return set(re.findall(r"(?<!\$)\$\{(\w+)\}", value)) | set(re.findall(r"^env:(\w+)$", value))
    return set()


def compose_cli() -> list[str] | None:
    """A Docker Compose v2 command, if this machine has one (none ships on PyPI or Debian 12)."""
    candidates = [["docker", "compose"], ["docker-compose"]]
    for command in candidates:
        if shutil.which(command[0]) is None:
            continue
        result = subprocess.run(
            [*command, "version"], capture_output=True, text=True, timeout=30, check=False
        )
        if result.returncode == 0 and re.search(r"\bv?2\.\d+", result.stdout):
            return command
    return None


# ---- the file as a whole -----------------------------------------------------------------------


def test_the_file_follows_the_compose_specification() -> None:
    if importlib.util.find_spec("check_jsonschema") is None:
        _missing("check-jsonschema", CHECK_JSONSCHEMA_INSTALL)
    result = run(sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_compose_accepts_the_stack(tmp_path: Path) -> None:
    command = compose_cli()
    if command is None:
        # Not a validator of record: the schema test above is (Compose v2 needs Docker's own
        # packages, which this project's registries do not carry).
        pytest.skip("no Docker Compose v2 CLI here; the Compose Specification schema check covers the file")
    result = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **ENVIRONMENT},
    )
    assert result.returncode == 0, result.stderr
    # Parsed, not only the exit code: some wrappers of the binary lose it.
    assert set(json.loads(result.stdout)["services"]) == set(SERVICES)


def test_the_stack_is_manifold_redis_prometheus_grafana_and_the_trace_pipeline() -> None:
    assert set(SERVICES) == {"manifold", "redis", "prometheus", "grafana", "otel-collector", "tempo"}
    assert STACK["name"] == "manifold"


# ---- services ------------------------------------------------------------------------------------


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_has_a_health_check(service: str) -> None:
    healthcheck = SERVICES[service]["healthcheck"]
    assert healthcheck["test"][0] == "CMD", "exec form: no shell needed in the image"
    assert {"interval", "timeout", "retries"} <= set(healthcheck)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_dependencies_are_services_and_healthy_means_health_checked(service: str) -> None:
    for dependency, condition in SERVICES[service].get("depends_on", {}).items():
        assert dependency in SERVICES, f"{service} depends on unknown service {dependency!r}"
        if condition["condition"] == "service_healthy":
            assert "healthcheck" in SERVICES[dependency]


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_mounted_file_exists(service: str) -> None:
    for source, target in bind_mounts(service):
        assert source.exists(), f"{service}: {source} (mounted at {target}) does not exist"
        assert DEPLOY in source.parents, f"{service}: {source} is outside deploy/"
    declared = set(STACK.get("volumes", {}))
    for volume in SERVICES[service].get("volumes", []):
        if not volume.startswith((".", "/")):
            assert volume.split(":")[0] in declared, f"{service}: volume {volume} is not declared"


@pytest.mark.parametrize("service", sorted(name for name in SERVICES if "image" in SERVICES[name]))
def test_images_are_pinned_to_exact_versions(service: str) -> None:
    image = SERVICES[service]["image"]
    if "build" in SERVICES[service]:
        return  # built here, from the pinned base of deploy/Dockerfile
    assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+[\w.-]*", image), image


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_ports_are_published_on_loopback_only(service: str) -> None:
    for port in SERVICES[service].get("ports", []):
        assert str(port).startswith("127.0.0.1:"), f"{service}: {port} would listen on every interface"


def test_manifold_is_built_from_the_examples_target_of_the_dockerfile() -> None:
    build = SERVICES["manifold"]["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert context == DEPLOY.parent
    assert (context / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    assert build["target"] in BY_NAME


def test_manifold_runs_read_only_and_unprivileged() -> None:
    manifold = SERVICES["manifold"]
    assert manifold["read_only"] is True
    assert manifold["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in manifold["security_opt"]
    assert "/tmp" in manifold["tmpfs"]


def test_the_manifold_health_check_waits_for_readyz() -> None:
    test = SERVICES["manifold"]["healthcheck"]["test"]
    assert test[1:3] == ["python", "-c"]
    compile(test[3], "healthcheck", "exec")
    assert "/readyz" in test[3]


# ---- Manifold's config in the stack --------------------------------------------------------------


def test_manifolds_config_is_valid_with_the_environment_compose_passes() -> None:
    config = manifold_config()
    assert config.listen.host == "0.0.0.0"
    assert config.listen.port == 8080
    # Bound to 0.0.0.0 Manifold would accept any Host: the stack lists the published names.
    assert set(config.listen.allowed_hosts) == {"localhost:8080", "127.0.0.1:8080"}
    published = {str(p).rsplit(":", 1)[-1] for p in SERVICES["manifold"]["ports"]}
    assert published == {str(config.listen.port)}


def test_every_variable_the_config_reads_is_passed_to_the_container() -> None:
    wanted = variables_read(yaml.safe_load(host_path("manifold", "/etc/manifold/manifold.yaml").read_text()))
    assert wanted <= set(SERVICES["manifold"]["environment"]), wanted


def test_rate_limits_are_kept_in_the_stacks_redis() -> None:
    limits = manifold_config().rate_limits
    assert limits.backend == "redis"
    host = re.fullmatch(r"redis://([\w.-]+):6379/\d+", limits.redis_url)
    assert host is not None
    assert host[1] in SERVICES
    assert SERVICES["manifold"]["depends_on"][host[1]]["condition"] == "service_healthy"


def test_manifold_loads_the_policy_the_stack_mounts() -> None:
    files = manifold_config().policy.files
    assert files
    policy = load_policy([host_path("manifold", f) for f in files])
    assert policy.limits, "the stack's policy has rate limits, for Redis to keep"


def test_the_pins_file_is_on_the_writable_volume() -> None:
    pins = PurePosixPath(manifold_config().policy.pins.path)
    assert any(target in pins.parents for target in named_volume_targets("manifold"))


def test_the_servers_manifold_starts_are_in_the_examples_image() -> None:
    copied = copies(BY_NAME[SERVICES["manifold"]["build"]["target"]])
    for server in manifold_config().enabled_servers():
        assert server.command == "/opt/manifold/bin/python"  # the virtualenv that has `mcp`
        (script,) = server.args
        found = [
            DEPLOY.parent / source / PurePosixPath(script).relative_to(destination)
            for sources, destination in copied
            for source in sources
            if PurePosixPath(destination) in PurePosixPath(script).parents
        ]
        assert found, f"{server.id}: {script} is not copied into the image"
        assert found[0].is_file(), f"{server.id}: {script} is not in the repository"
        assert server.required, f"{server.id}: /readyz should wait for it"


# ---- Prometheus and Grafana ----------------------------------------------------------------------


def test_prometheus_loads_the_alert_rules_and_scrapes_manifold(promtool: str, tmp_path: Path) -> None:
    # Lay the files out as the container sees them, then let promtool load config and rules.
    for source, target in bind_mounts("prometheus"):
        copy = tmp_path / target.relative_to("/")
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
    for target, variable in secret_files("prometheus").items():
        (tmp_path / target.relative_to("/")).write_text(ENVIRONMENT[variable])
    result = run(promtool, "check", "config", tmp_path / "etc/prometheus/prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout
    config = yaml.safe_load(host_path("prometheus", "/etc/prometheus/prometheus.yml").read_text())
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "manifold"]
    (discovery,) = job["dns_sd_configs"]
    assert discovery["names"] == ["manifold"]
    assert discovery["port"] == manifold_config().listen.port
    assert job["metrics_path"] == manifold_config().metrics.path


def secret_files(service: str) -> dict[PurePosixPath, str]:
    """Where ``service`` finds each of its secrets -> the environment variable it is made of."""
    files = {}
    for secret in SERVICES[service].get("secrets", []):
        source = secret if isinstance(secret, str) else secret["source"]
        target = secret.get("target", source) if isinstance(secret, dict) else source
        path = PurePosixPath(target) if target.startswith("/") else PurePosixPath("/run/secrets") / target
        files[path] = STACK["secrets"][source]["environment"]
    return files


def test_prometheus_scrapes_with_the_key_manifold_gives_the_metrics_role() -> None:
    # Manifold has API keys, so /metrics needs one with metrics.role (proxy.inbound.observers).
    config = yaml.safe_load(host_path("prometheus", "/etc/prometheus/prometheus.yml").read_text())
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "manifold"]
    assert job["authorization"]["type"] == "Bearer"
    credentials = PurePosixPath("/etc/prometheus") / job["authorization"]["credentials_file"]
    variable = secret_files("prometheus")[credentials]
    manifold = manifold_config()
    assert manifold.metrics.require_auth is None  # the default: on, since keys are configured
    (key,) = [k for k in manifold.auth.api_keys if k.key == f"env:{variable}"]
    assert manifold.metrics.role in key.roles
    assert variable in SERVICES["manifold"]["environment"]


def test_grafana_gets_the_prometheus_datasource_and_the_dashboard() -> None:
    datasources = yaml.safe_load(
        host_path("grafana", "/etc/grafana/provisioning/datasources/prometheus.yaml").read_text()
    )["datasources"]
    (prometheus,) = datasources
    assert prometheus["type"] == "prometheus"
    tempo = yaml.safe_load(
        host_path("grafana", "/etc/grafana/provisioning/datasources/tempo.yaml").read_text()
    )
    (traces,) = tempo["datasources"]
    # An exemplar's trace_id opens the trace in Tempo.
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"] == [
        {"name": "trace_id", "datasourceUid": traces["uid"]}
    ]
    assert prometheus["isDefault"] is True
    assert prometheus["url"] == "http://prometheus:9090"
    providers = yaml.safe_load(
        host_path("grafana", "/etc/grafana/provisioning/dashboards/manifold.yaml").read_text()
    )["providers"]
    (provider,) = providers
    directory = PurePosixPath(provider["options"]["path"])
    dashboards = [
        source for source, target in bind_mounts("grafana") if target.parent == directory and source.is_file()
    ]
    assert dashboards == [DEPLOY / "grafana" / "manifold-dashboard.json"]
    assert json.loads(dashboards[0].read_text())["title"] == "Manifold"
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert host_path("grafana", home) == dashboards[0]
