"""The shape of the house, pinned: which package may import which, how small things stay, and
that every module has its tests where a newcomer would look for them.

``ALLOWED`` is the one table of edges between Manifold's packages: a package may import only the
packages named on its row (and the root ``proxy`` package, for ``__version__``). The rows are
layered bottom to top, so the graph they allow has no cycle (a test checks the table itself). A
new feature that needs a new edge adds it here, where a reviewer sees it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROXY = REPO / "proxy"
TESTS = REPO / "tests"
ROOT_MAX_LINES = 250  # the composition root builds and runs the parts, nothing else
MODULE_MAX_LINES = 600
TOP_LEVEL_MAX = 5  # modules directly under proxy/

# package -> the packages it may import. Bottom to top: each row names only rows above it.
ALLOWED: Mapping[str, frozenset[str]] = {
    "core": frozenset(),
    "guard": frozenset(),  # pure detection (proxy.guard.detect): text in, findings out
    "protocol": frozenset({"core"}),
    "catalog": frozenset({"core", "protocol"}),
    "policy": frozenset({"core", "catalog", "guard"}),  # guardrail rules name the detectors
    "config": frozenset({"core", "protocol", "catalog", "policy"}),
    "openapi": frozenset({"core", "config"}),  # pure: an OpenAPI document to tools and requests
    "tracing": frozenset({"core", "protocol", "config"}),
    "observe": frozenset({"core", "protocol", "config"}),
    "outbound": frozenset({"core", "protocol", "config", "tracing", "openapi"}),
    "ratelimit": frozenset({"policy", "config"}),
    "auth": frozenset({"core", "policy", "config"}),
    "credentials": frozenset({"core", "policy", "config", "auth"}),
    "guardrails": frozenset({"core", "guard", "policy", "config", "observe", "outbound"}),
    "enforce": frozenset({"core", "catalog", "policy", "config", "observe", "guardrails"}),
    "clients": frozenset(
        {"core", "protocol", "policy", "config", "observe", "auth", "credentials", "enforce"}
    ),
    "pipeline": frozenset(
        {"core", "protocol", "catalog", "policy", "config", "observe", "outbound", "ratelimit"}
        | {"credentials", "enforce", "clients", "guardrails", "tracing"}
    ),
    "servers": frozenset(
        {"core", "protocol", "policy", "config", "observe", "outbound", "credentials", "clients", "pipeline"}
    ),
    "views": frozenset(
        {"core", "protocol", "catalog", "policy", "config", "observe", "outbound", "enforce", "clients"}
        | {"pipeline", "servers"}
    ),
    # tasks relayed: ids, records (memory, Redis), tasks/* and status routing
    "tasks": frozenset(
        {"core", "protocol", "catalog", "policy", "config", "observe", "outbound", "clients", "pipeline"}
    ),
    "notify": frozenset(
        {"protocol", "policy", "config", "outbound", "enforce", "clients", "pipeline", "servers", "views"}
        | {"tasks"}
    ),
    "router": frozenset(
        {"core", "protocol", "catalog", "policy", "config", "observe", "outbound", "clients", "pipeline"}
        | {"servers", "views", "notify", "tracing", "tasks"}
    ),
    "inbound": frozenset(
        {"core", "protocol", "policy", "config", "observe", "outbound", "ratelimit", "auth", "credentials"}
        | {"enforce", "clients", "tracing"}
    ),
    "app": frozenset(
        {"core", "catalog", "policy", "config", "observe", "outbound", "auth", "credentials", "enforce"}
        | {"clients", "pipeline", "servers", "views", "notify", "router", "tasks"}
    ),
    "admin": frozenset(
        {
            "core",
            "policy",
            "config",
            "observe",
            "auth",
            "credentials",
            "enforce",
            "ratelimit",
            "inbound",
            "app",
        }
    ),
    # the web console at /admin/ (credentials: sealing sign-ins kept in Redis)
    "console": frozenset({"core", "config", "auth", "inbound", "admin", "credentials"}),
    "cli": frozenset(
        {
            "admin",
            "console",
            "core",
            "protocol",
            "policy",
            "config",
            "observe",
            "auth",
            "credentials",
            "enforce",
            "inbound",
            "app",
            "tracing",
            "openapi",
            "outbound",  # manifold check fetches an OpenAPI document at a URL as serving does
        }
    ),
}

# Modules whose tests live elsewhere than the mirrored path, and where.
TESTED_ELSEWHERE: Mapping[str, str] = {
    "admin/openapi.py": "every answer checked against it: tests/admin/test_routes.py",
    "admin/reads.py": "through the routes: tests/admin/test_routes.py, tests/interaction/test_admin_api.py",
    "admin/service.py": "through the routes: tests/admin/test_routes.py, tests/interaction/test_admin_api.py",
    "admin/wiring.py": "started by manifold serve: tests/interaction/test_admin_api.py",
    "config/admin.py": "with the API it configures: tests/admin/test_http.py, tests/config/test_model.py",
    "app/gateway.py": "the composition root: every interaction test runs it; tests/router/test_dispatch.py",
    "app/reloader.py": "end to end on a running manifold: tests/interaction/test_reload.py",
    "auth/discovery.py": "with the resource server it feeds: tests/auth/test_oauth.py",
    "auth/introspection.py": "with the resource server it feeds: tests/auth/test_oauth.py",
    "auth/resource_metadata.py": "with the resource server it describes: tests/auth/test_oauth.py",
    "catalog/views.py": "through the views that use it: tests/views/test_catalogs.py, test_endpoints.py",
    "cli/inspection.py": "as commands: tests/cli/test_main.py, tests/interaction/test_cli_policy.py",
    "cli/__main__.py": "python -m proxy.cli: tests/cli/test_commands.py runs it",
    "clients/contract.py": "a Protocol: its implementations' tests (tests/views, tests/inbound)",
    "console/backend.py": "a Protocol: tests/console/fake_backend.py implements it; tests/console/",
    "console/live.py": "over the real admin service, end to end: tests/interaction/test_admin_console.py",
    "console/pages_access.py": "through the routes: tests/console/test_routes.py",
    "console/pages_people.py": "through the routes: tests/console/test_routes.py",
    "console/pages_servers.py": "through the routes: tests/console/test_routes.py",
    "console/shown.py": "data and types only: through the routes, tests/console/test_routes.py",
    "config/base.py": "through the config model: tests/config/test_model.py",
    "config/loading.py": "loading and its errors: tests/config/test_model.py",
    "config/sections.py": "through the config model: tests/config/test_model.py",
    "config/servers.py": "servers and desktop spellings: tests/config/test_model.py",
    "config/discovery.py": "with the service it configures: tests/views/test_discovery.py",
    "config/oauth.py": "with the resource server it configures: tests/auth/test_oauth.py",
    "config/observe.py": "with what it configures: tests/observe/test_logs.py, test_metrics.py",
    "config/tracing.py": "with what it configures: tests/tracing/test_settings.py",
    "config/policy.py": "through the config model: tests/config/test_model.py",
    "config/guardrails.py": "with the guard it builds: tests/guardrails/test_wiring.py",
    "guardrails/guard.py": "through the guard stage: tests/pipeline/stages/test_guard.py, tests/interaction/",
    "policy/guardrails.py": "rules refused and decided: tests/policy/test_guardrail_engine.py",
    "config/ratelimit.py": "with the stores it configures: tests/ratelimit/, tests/policy/test_limits.py",
    "core/algorithms.py": "with the auth settings: tests/config/test_auth.py",
    "core/documents.py": "through the config and policy loaders: tests/config/test_model.py, tests/policy",
    "core/errors.py": "at every boundary that maps them: tests/observe/test_boundary.py",
    "core/identity.py": "data only; keyed everywhere: tests/core/test_keys.py, tests/policy/test_engine.py",
    "credentials/exchange.py": "against a real AS: tests/credentials/test_on_behalf_live.py",
    "credentials/inbound.py": "with the token modes: tests/credentials/test_token_modes.py",
    "credentials/on_behalf.py": "tests/credentials/test_refresh.py, test_on_behalf_live.py",
    "credentials/stores.py": "tests/credentials/test_store.py",
    "credentials/wiring.py": "tests/credentials/test_token_modes.py",
    "inbound/asgi.py": "through the HTTP endpoints: tests/inbound/test_streamable_http.py",
    "inbound/exchange.py": "through both stateless transports: tests/inbound/test_stateless_http.py",
    "inbound/listen_sse.py": "tests/clients/test_listen_streams.py (listen over HTTP)",
    "inbound/pages.py": "through the pages: tests/inbound/test_approval_page.py",
    "inbound/reading.py": "hostile input, every transport: tests/interaction/test_hostile_input.py",
    "inbound/server.py": "tests/inbound/test_connection_guard.py and every interaction test",
    "inbound/signin_page.py": "tests/interaction/test_credentials_oauth.py",
    "inbound/stdio_stateless.py": "through stdio: tests/inbound/test_stdio.py",
    "notify/server_events.py": "end to end: tests/interaction/test_server_logs.py, test_reload.py",
    "outbound/factory.py": "through every transport's tests: tests/outbound/",
    "outbound/health.py": "through the connection: tests/outbound/test_connection.py",
    "outbound/negotiation.py": "through the connection: tests/outbound/test_negotiate.py",
    "outbound/pending.py": "through the connection: tests/outbound/test_connection.py",
    "outbound/levels.py": "tests/notify/test_server_logs.py",
    "outbound/over_http/h1_wire.py": "with its pool: tests/outbound/over_http/test_h1.py",
    "outbound/over_http/common.py": "through the HTTP transports: tests/outbound/over_http/",
    "outbound/over_http/streamable.py": "tests/outbound/over_http/test_modes.py, test_redirects.py",
    "outbound/transport.py": "a contract: every transport's tests (tests/outbound/)",
    "pipeline/order.py": "the order is pinned in tests/pipeline/test_context.py",
    "protocol/versions.py": "through both eras everywhere: tests/protocol/test_stateless.py",
    "router/params.py": "through the method table: tests/router/test_dispatch.py",
    "servers/connections.py": "tests/notify/ and every interaction test",
    "router/tasks.py": "the task methods on a running manifold: tests/interaction/test_tasks.py",
    "tasks/redis_store.py": "beside the memory store, on a real redis-server: tests/tasks/test_store.py",
    "tasks/wiring.py": "through the gateway: tests/interaction/test_tasks.py",
}


def _imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, at any depth (also under TYPE_CHECKING or in a function)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            yield node.module
            # `from proxy import pipeline` imports proxy.pipeline as well.
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _package_of(name: str) -> str | None:
    """``proxy.views.catalogs`` -> ``views``; ``proxy`` itself and foreign modules -> None."""
    parts = name.split(".")
    if parts[0] != "proxy" or len(parts) < 2 or not (PROXY / parts[1]).is_dir():
        return None
    return parts[1]


def _package_edges(root: Path = PROXY) -> dict[tuple[str, str], list[str]]:
    """``(from, to)`` -> the modules that make the edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        source = path.relative_to(root).parts[0]
        if source.endswith(".py"):
            continue  # the root modules (proxy/__init__.py, __main__.py) may import anything
        for name in _imports(path):
            target = _package_of(name)
            if target is not None and target != source:
                edges.setdefault((source, target), []).append(str(path.relative_to(REPO)))
    return edges


def _cycle(graph: Mapping[str, frozenset[str]]) -> list[str] | None:
    """One cycle of ``graph`` if it has any."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, frozenset())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def _modules() -> list[Path]:
    return sorted(path for path in PROXY.rglob("*.py") if "__pycache__" not in path.parts)


def test_every_package_has_a_row_in_the_table() -> None:
    packages = {path.name for path in PROXY.iterdir() if (path / "__init__.py").exists()}
    assert packages == set(ALLOWED)


def test_the_table_allows_no_cycle() -> None:
    assert _cycle(ALLOWED) is None


def test_every_import_between_packages_is_an_edge_of_the_table() -> None:
    offences = [
        f"{source} -> {target} (not in ALLOWED[{source!r}]): {', '.join(sorted(set(where)))}"
        for (source, target), where in sorted(_package_edges().items())
        if target not in ALLOWED.get(source, frozenset())
    ]
    assert offences == []


def test_the_module_graph_has_no_cycle_either() -> None:
    """No lazy import hides a cycle: imports inside functions count as much as the others."""
    graph: dict[str, set[str]] = {}
    for path in _modules():
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        graph[name] = set()
        for imported in _imports(path):
            candidate = PROXY.parent / Path(*imported.split("."))
            if (candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists()) and not (
                name.startswith(imported + ".")  # a module importing its own package
            ):
                graph[name].add(imported)
    assert _cycle({node: frozenset(targets - {node}) for node, targets in graph.items()}) is None


def test_few_modules_sit_directly_under_proxy() -> None:
    top = sorted(path.name for path in PROXY.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MAX, top


@pytest.mark.parametrize("path", _modules(), ids=lambda path: str(path.relative_to(PROXY)))
def test_no_module_is_over_the_size_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MODULE_MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines: split it along a seam"


def test_no_module_or_package_is_named_after_a_standard_library_module() -> None:
    names = {path.stem for path in _modules()} | {path.parent.name for path in _modules()}
    assert sorted(names & set(sys.stdlib_module_names)) == []


@pytest.mark.parametrize(
    "package", sorted(p for p in PROXY.rglob("__init__.py") if "__pycache__" not in p.parts), ids=str
)
def test_every_package_says_what_it_is_for(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse(package.read_text()))
    assert docstring, f"{package.relative_to(REPO)} has no docstring saying what the package is for"


def test_every_top_level_package_says_what_it_may_import() -> None:
    silent = [
        name
        for name in ALLOWED
        if "May import"
        not in (ast.get_docstring(ast.parse((PROXY / name / "__init__.py").read_text())) or "")
    ]
    assert silent == []


def test_every_module_has_its_tests_at_the_mirrored_path_or_says_where() -> None:
    missing = []
    for path in _modules():
        if path.name == "__init__.py" or path.parent == PROXY:
            continue
        relative = path.relative_to(PROXY)
        mirrored = TESTS / relative.parent / f"test_{relative.name}"
        if not mirrored.exists() and str(relative) not in TESTED_ELSEWHERE:
            missing.append(str(relative))
    assert missing == []


def test_no_exemption_names_a_module_that_is_gone_or_has_its_mirrored_tests() -> None:
    stale = [
        module
        for module in TESTED_ELSEWHERE
        if not (PROXY / module).exists()
        or (TESTS / Path(module).parent / f"test_{Path(module).name}").exists()
    ]
    assert stale == []


def test_the_composition_root_stays_small() -> None:
    lines = len((PROXY / "app" / "gateway.py").read_text().splitlines())
    assert lines <= ROOT_MAX_LINES, (
        f"proxy/app/gateway.py has {lines} lines; it builds and runs the parts only"
    )


def test_the_checks_see_an_offending_import(tmp_path: Path) -> None:
    """The import walk finds imports nested anywhere, and an upward edge is an offence."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from proxy.app.gateway import Gateway\n"
        "def f() -> None:\n    import proxy.router.dispatch\n"
    )
    found = set(_imports(module))
    assert {"proxy.app.gateway", "proxy.router.dispatch"} <= found
    assert {_package_of(name) for name in found} >= {"app", "router"}
    assert "app" not in ALLOWED["core"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})}) == [
        "a",
        "b",
        "c",
        "a",
    ]
    assert _cycle({"a": frozenset({"b"}), "b": frozenset()}) is None
