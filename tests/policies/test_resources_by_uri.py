"""Decision table for policies/examples/resources-by-uri.yaml."""

from __future__ import annotations

import pytest

from proxy.policy.engine import Subject
from proxy.policy.model import Effect, Identity
from proxy.protocol.uris import normalize_uri
from tests.policies.tables import ANONYMOUS, READ_ONLY, check, engine_for, person, prompt, resource, tool

ENGINE = engine_for("resources-by-uri")
ANN = person("ann")
HANS = person("hans", "hr")

ROWS = [
    pytest.param(
        ANN,
        resource("file:///srv/docs/handbook.md", "docs"),
        "allow",
        ("docs-for-everyone",),
        id="reads-docs",
    ),
    pytest.param(
        ANN,
        resource("file:///srv/docs/a/b/c.md", "docs"),
        "allow",
        ("docs-for-everyone",),
        id="reads-nested-docs",
    ),
    pytest.param(
        ANN, resource("file:///srv/docs/hr/pay.csv", "docs"), "deny", ("hr-folder-for-hr",), id="no-hr-folder"
    ),
    pytest.param(
        HANS,
        resource("file:///srv/docs/hr/pay.csv", "docs"),
        "allow",
        ("docs-for-everyone",),
        id="hr-reads-hr-folder",
    ),
    pytest.param(ANN, resource("file:///etc/passwd", "docs"), "deny", (), id="outside-docs"),
    pytest.param(ANN, resource("file:///srv/docs/x.md", "other"), "deny", (), id="other-server"),
    pytest.param(ANN, prompt("docs.summarise"), "allow", ("docs-for-everyone",), id="docs-prompt"),
    pytest.param(ANN, tool("docs.search", READ_ONLY), "deny", (), id="no-tools"),
    pytest.param(
        ANONYMOUS, resource("file:///srv/docs/handbook.md", "docs"), "deny", (), id="anonymous-nothing"
    ),
]


@pytest.mark.parametrize(("identity", "subject", "effect", "rule_ids"), ROWS)
def test_resources_by_uri(
    identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]
) -> None:
    check(ENGINE, identity, subject, effect, rule_ids)


@pytest.mark.parametrize(
    "spelling",
    [
        "file:///srv/docs/public/../hr/pay.csv",
        "FILE://localhost/srv/docs/%68r/pay.csv",
        "file:/srv/docs/./hr//pay.csv",
        "file:///srv/docs/public/%2e%2E/hr/pay.csv",
    ],
)
def test_the_hr_folder_is_denied_in_every_spelling_manifold_normalizes(spelling: str) -> None:
    """The globs see the URI as Manifold normalizes it before deciding (proxy.protocol.uris)."""
    check(ENGINE, ANN, resource(normalize_uri(spelling), "docs"), "deny", ("hr-folder-for-hr",))
