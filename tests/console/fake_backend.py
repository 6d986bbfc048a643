"""An in-memory :class:`~proxy.console.backend.Backend` for the console's unit tests: hostile
text in every field it serves, and a record of every action asked of it. (The console's end to
end tests drive the real service layer: tests/interaction/test_admin_console.py.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.console.backend import Answer, Refused, Rows
from proxy.core.identity import Identity

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
JS_URL = "javascript:alert(document.cookie)"


class FakeBackend:
    def __init__(self) -> None:
        self.acts: list[tuple[Any, ...]] = []
        self.broken = ""  # "credentials": that read is refused; "crash": it fails
        self.failing = {
            "id": f"bad{XSS}",
            "state": "backoff",
            "required": True,
            "restarts": 3,
            "last_error": f"exited with 1: {XSS}",
            "stderr_tail": [f"line {XSS}", JS_URL],
            "lists": {"tools": 0, "prompts": 0, "resources": 0},
            "calls": {
                "calls": 0,
                "per_second": 0.0,
                "error_rate": 0.0,
                "p50_ms": None,
                "p99_ms": None,
                "series": [0] * 30,
            },
        }
        self.ok = {
            "id": "fx",
            "state": "ready",
            "required": False,
            "restarts": 0,
            "last_error": None,
            "stderr_tail": [],
            "lists": {"tools": 2, "prompts": 1, "resources": 0},
            "calls": {
                "calls": 12,
                "per_second": 0.2,
                "error_rate": 0.25,
                "p50_ms": 1.5,
                "p99_ms": 9.0,
                "series": [0, 1, 4, 2, 5],
            },
        }

    async def servers(self) -> Rows:
        return [self.ok, self.failing]

    async def limits(self) -> Answer:
        if self.broken == "buckets":
            return {"buckets": [], "problem": f"the store could not be asked {XSS}", "refusals": []}
        bucket = {"rule": XSS, "bucket": f"per-user:{XSS}", "spent": 9.5, "burst": 10, "rate": "1/second"}
        return {"buckets": [bucket], "refusals": [{"at": 1_700_000_000.0, "limit": XSS}]}

    async def server(self, server_id: str) -> Answer | None:
        return next((s for s in (self.ok, self.failing) if s["id"] == server_id), None)

    async def catalog(self, roles: Sequence[str], name: str) -> Answer:
        self.acts.append(("catalog", list(roles), name))
        tool = {
            "name": f"fx.{XSS}",
            "description": XSS,
            "annotations": {"title": XSS, "source": JS_URL},
            "server": "fx",
            "original_name": XSS,
            "renamed": True,
            "switched_off": None,
        }
        return {
            "tools": [tool] if "staff" in roles else [],
            "prompts": [{"name": XSS, "description": JS_URL}],
            "resources": 3,
        }

    async def policy(self) -> Answer:
        rule = {"id": XSS, "effect": "deny", "description": XSS, "file": "/p.yaml", "line": 4}
        overlay = {"tool": f"fx.{XSS}", "role": None, "until": 2_000_000_000, "by": XSS}
        return {"rules": [rule], "overlays": [overlay]}

    async def explain(self, name: str, roles: Sequence[str], who: str) -> Answer | None:
        if name == "missing":
            return None
        return {
            "effect": "deny",
            "policy_effect": "allow",
            "rules": [XSS],
            "reason": XSS,
            "overlay": {"description": XSS},
        }

    async def sessions(self) -> Rows:
        return [
            {
                "id": "abc123def456",
                "identity": {"name": XSS, "roles": [XSS]},
                "transport": "http",
                "endpoint": XSS,
                "idle_seconds": 2.5,
            }
        ]

    async def approvals(self) -> Rows:
        return [
            {
                "id": "ap1",
                "tool": XSS,
                "caller": {"name": XSS},
                "state": "pending",
                "deadline": 2e9,
                "link": JS_URL,
            },
            {"id": f"ap2{XSS}", "tool": "t", "caller": "c", "state": "parked"},
        ]

    async def credentials(self) -> Rows:
        if self.broken == "credentials":
            raise Refused(503, f"the store is unreachable {XSS}")
        if self.broken == "crash":
            raise RuntimeError(f"a bug {XSS}")
        return [
            {"server": "fx", "kind": "oauth", "holder": {"source": "api_key", "issuer": "", "subject": XSS}}
        ]

    async def audit(self, filters: Mapping[str, str]) -> Rows:
        self.acts.append(("audit", dict(filters)))
        return [
            {
                "ts": "2026-11-27T15:00:00.000+00:00",
                "identity": XSS,
                "name": JS_URL,
                "outcome": XSS,
                "rules": [XSS],
            },
            {
                "ts": XSS,
                "identity": "ann",
                "action": "tool_off",
                "target": XSS,
                "outcome": "done",
                "from": XSS,
            },
        ]

    def _did(self, *what: Any) -> Answer:
        self.acts.append(what)
        return {"ok": True, "message": f"done {XSS}", "replicas": ["r1", XSS]}

    async def restart(self, server_id: str, by: Identity, address: str) -> Answer:
        return self._did("restart", server_id, by.name, address)

    async def drain(self, server_id: str, on: bool, by: Identity, address: str) -> Answer:
        return self._did("drain", server_id, on, by.name)

    async def end_session(self, session_id: str, by: Identity, address: str) -> Answer:
        return self._did("end", session_id, by.name, address)

    async def revoke(
        self, server_id: str, kind: str, holder: Mapping[str, str], by: Identity, address: str
    ) -> Answer:
        return self._did("revoke", server_id, kind, dict(holder), by.name, address)

    async def tool_off(
        self, tool: str, role: str | None, minutes: float, reason: str, by: Identity, address: str
    ) -> Answer:
        return self._did("off", tool, role, minutes, reason, by.name)

    async def tool_on(self, tool: str, role: str | None, by: Identity, address: str) -> Answer:
        return self._did("on", tool, role, by.name)

    async def reload_plan(self, config_text: str | None) -> Answer:
        self.acts.append(("plan", config_text))
        if config_text is not None and "bad" in config_text:
            return {"problems": [f"servers.x: {XSS}"]}
        return {"add": [XSS], "remove": ["old"], "restart": [], "needs_restart": ["listen.port"]}

    async def reload_apply(self, config_text: str | None, by: Identity, address: str) -> Answer:
        self._did("apply", config_text, by.name)
        return {"ok": True, "message": "applied", "plan": {"add": [XSS]}}
