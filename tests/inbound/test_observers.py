"""What the probes and /metrics show whom: the pure parts of proxy.inbound.observers."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config.model import Config
from proxy.inbound.observers import (
    detailed_health,
    ip_literal,
    metrics_require_auth,
    public_health,
    warnings,
)

REPORT: dict[str, dict[str, Any]] = {
    "search": {
        "state": "backoff",
        "required": True,
        "reason": "POST http://10.0.0.7:8000/mcp?access_token=s3cret failed",
    },
    "github": {"state": "ready", "required": False, "reason": None},
    "local": {"state": "failing", "required": False, "reason": "x", "stderr": ["token=hunter2 leaked"]},
}
KEY = {"name": "ci", "key": "sha256:" + "a" * 64}


@pytest.mark.parametrize(
    ("host", "literal"),
    [
        ("10.1.2.3:8080", True),
        ("10.1.2.3", True),
        ("[fd00::7]:9090", True),
        ("[::1]", True),
        ("::1", True),
        ("manifold.example.com:8080", False),
        ("localhost:8080", False),
        ("10.1.2.3.nip.io:8080", False),  # a name that spells an address is still a name
        ("[not-an-address]:80", False),
        ("", False),
    ],
)
def test_only_an_address_counts_as_an_ip_literal_host(host: str, literal: bool) -> None:
    assert ip_literal(host) is literal


def test_the_public_view_counts_servers_by_state_and_names_none() -> None:
    body = public_health(REPORT, ["search"])
    assert body == {
        "counts": {"total": 3, "starting": 0, "ready": 1, "failing": 1, "backoff": 1},
        "waiting": 1,
    }
    assert "search" not in str(body)


def test_the_detailed_view_redacts_credentials_in_reasons_and_stderr() -> None:
    body = detailed_health(REPORT, ["search"])
    assert body["waiting_for"] == ["search"]
    assert set(body["servers"]) == {"search", "github", "local"}
    assert "s3cret" not in str(body)
    assert "hunter2" not in str(body)
    assert "10.0.0.7:8000" in body["servers"]["search"]["reason"]  # the address is the observer's to see
    assert REPORT["search"]["reason"].endswith("s3cret failed")  # the report itself is not changed


@pytest.mark.parametrize(
    ("auth", "setting", "required"),
    [
        ({}, None, False),  # nobody can prove anything: nothing to require
        ({"api_keys": [KEY]}, None, True),
        ({"jwt": [{"issuer": "i", "audience": "a", "secret": "s" * 32}]}, None, True),
        ({"api_keys": [KEY]}, False, False),
        ({}, True, True),
    ],
)
def test_metrics_need_credentials_once_any_is_configured_unless_set(
    auth: dict[str, Any], setting: bool | None, required: bool
) -> None:
    config = Config.model_validate({"auth": auth, "metrics": {"require_auth": setting}})
    assert metrics_require_auth(config) is required


def test_only_an_explicit_false_with_credentials_is_warned_about() -> None:
    open_with_keys = Config.model_validate({"auth": {"api_keys": [KEY]}, "metrics": {"require_auth": False}})
    (warning,) = warnings(open_with_keys)
    assert "metrics.require_auth is false while credentials are configured" in warning
    assert warnings(Config.model_validate({"auth": {"api_keys": [KEY]}})) == []
    assert warnings(Config.model_validate({"metrics": {"require_auth": False}})) == []
