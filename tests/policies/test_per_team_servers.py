"""Decision table for policies/examples/per-team-servers.yaml."""

from __future__ import annotations

import pytest

from proxy.policy.engine import Subject
from proxy.policy.model import Effect, Identity
from tests.policies.tables import ANONYMOUS, READ_ONLY, check, engine_for, person, prompt, tool

ENGINE = engine_for("per-team-servers")
DANA = person("dana", "team-data")
WES = person("wes", "team-web")
OLGA = person("olga", "on-call")
REL = person("rel", "team-web", "release-manager")

ROWS = [
    pytest.param(DANA, tool("warehouse.query"), "allow", ("data-team-servers",), id="data-team-warehouse"),
    pytest.param(
        DANA, tool("metabase.create_card"), "allow", ("data-team-servers",), id="data-team-metabase"
    ),
    pytest.param(DANA, tool("github.get_issue", READ_ONLY), "deny", (), id="data-team-not-github"),
    pytest.param(WES, tool("github.create_issue"), "allow", ("web-team-servers",), id="web-team-github"),
    pytest.param(WES, tool("warehouse.query"), "deny", (), id="web-team-not-warehouse"),
    pytest.param(
        WES,
        tool("vercel.deploy_production"),
        "deny",
        ("production-deploys-need-release-manager",),
        id="web-team-no-prod-deploy",
    ),
    pytest.param(
        WES,
        tool("vercel.promote_preview"),
        "deny",
        ("production-deploys-need-release-manager",),
        id="web-team-no-promote",
    ),
    pytest.param(
        WES, tool("vercel.deploy_preview"), "allow", ("web-team-servers",), id="web-team-preview-deploy"
    ),
    pytest.param(
        REL, tool("vercel.deploy_production"), "allow", ("web-team-servers",), id="release-manager-deploys"
    ),
    pytest.param(OLGA, tool("github.get_issue"), "allow", ("on-call-reads-github",), id="on-call-get"),
    pytest.param(OLGA, tool("github.search_code"), "allow", ("on-call-reads-github",), id="on-call-search"),
    pytest.param(OLGA, tool("github.create_issue"), "deny", (), id="on-call-cannot-create"),
    pytest.param(OLGA, prompt("github.get_issue"), "deny", (), id="on-call-glob-is-for-tools-only"),
    pytest.param(OLGA, tool("docs.search"), "allow", ("everyone-docs",), id="anyone-docs"),
    pytest.param(ANONYMOUS, tool("docs.search"), "deny", (), id="anonymous-no-docs"),
    pytest.param(person("zed"), tool("warehouse.query"), "deny", (), id="no-team-nothing"),
]


@pytest.mark.parametrize(("identity", "subject", "effect", "rule_ids"), ROWS)
def test_per_team_servers(
    identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]
) -> None:
    check(ENGINE, identity, subject, effect, rule_ids)
