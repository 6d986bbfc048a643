"""``credentials.mode: secret``: what an identity's connection is built with, and what a caller
without a secret is told."""

from __future__ import annotations

import pytest

from proxy.config.loading import config_from_mapping
from proxy.core.errors import ServerUnavailable, SignInNeeded
from proxy.core.redaction import redact_text
from proxy.credentials import Credentials, Sources
from proxy.credentials.sealing import Unsealable, new_key
from proxy.credentials.secret import SecretSource
from proxy.credentials.store import Stored, StoreError
from proxy.policy.model import Identity, IdentityKey

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset(), "api_key")
ALICE_OF_IDP = Identity("alice", frozenset(), "jwt", issuer="https://id.example.com", subject="u-1")
ANONYMOUS = Identity("anonymous", frozenset(), "anonymous")


class Memory:
    def __init__(self, failure: Exception | None = None) -> None:
        self.values: dict[tuple[str, str, IdentityKey], str] = {}
        self.failure = failure

    async def get(self, kind: str, server_id: str, holder: IdentityKey) -> str | None:
        if self.failure is not None:
            raise self.failure
        return self.values.get((kind, server_id, holder))

    async def put(self, kind: str, server_id: str, holder: IdentityKey, value: str) -> None:
        self.values[(kind, server_id, holder)] = value

    async def delete(self, kind: str, server_id: str, holder: IdentityKey) -> bool:
        return self.values.pop((kind, server_id, holder), None) is not None

    async def entries(self) -> list[Stored]:
        return [Stored(k, s, h) for k, s, h in self.values]

    async def aclose(self) -> None:
        return None


def source(store: Memory) -> SecretSource:
    config = config_from_mapping(
        {
            "credentials": {"key": new_key()},
            "servers": {
                "web": {
                    "url": "http://127.0.0.1:9/mcp",
                    "credentials": {"mode": "secret", "header": "X-Token", "template": "token {secret}"},
                },
                "cli": {"command": "server", "credentials": {"mode": "secret", "env": "TOKEN"}},
            },
        },
        environ={},
    )
    return SecretSource(config.servers, store)


async def test_an_http_server_gets_the_header_and_a_stdio_server_the_variable() -> None:
    store = Memory()
    store.values[("secret", "web", ALICE.key)] = "alice-web-token"
    store.values[("secret", "cli", ALICE.key)] = "alice-cli-token"
    secrets = source(store)
    assert await secrets.credentials(ALICE, "web") == Credentials(
        headers={"X-Token": "token alice-web-token"}, label="secret"
    )
    assert await secrets.credentials(ALICE, "cli") == Credentials(
        env={"TOKEN": "alice-cli-token"}, label="secret"
    )
    # Loaded, it is redacted from logs from now on; its repr never shows it.
    assert "alice-web-token" not in redact_text("sent alice-web-token")
    assert "alice-web-token" not in repr(await secrets.credentials(ALICE, "web"))


async def test_a_caller_without_a_secret_is_told_the_command_that_keeps_one() -> None:
    secrets = source(Memory())
    with pytest.raises(SignInNeeded) as refused:
        await secrets.credentials(ALICE_OF_IDP, "web")
    assert refused.value.server_id == "web"
    assert refused.value.url is None
    assert "--server web --identity u-1 --source jwt --issuer https://id.example.com --secret-stdin" in str(
        refused.value
    )


async def test_an_anonymous_caller_never_gets_a_secret_even_one_kept_under_its_name() -> None:
    store = Memory()
    store.values[("secret", "web", ANONYMOUS.key)] = "planted-token"
    with pytest.raises(SignInNeeded, match="authenticate to Manifold first"):
        await source(store).credentials(ANONYMOUS, "web")


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (Unsealable("InvalidTag"), "your stored secret cannot be read by Manifold"),
        (StoreError("cannot read the credential store /x: Permission denied"), "cannot be read now"),
    ],
)
async def test_an_unreadable_store_or_entry_is_the_servers_unavailability_not_a_sign_in(
    failure: Exception, said: str
) -> None:
    with pytest.raises(ServerUnavailable) as refused:
        await source(Memory(failure)).credentials(ALICE, "web")
    assert not isinstance(refused.value, SignInNeeded)
    assert said in str(refused.value)


async def test_sources_ask_nobody_for_a_shared_server() -> None:
    assert await Sources({}).credentials(ALICE, "anything") == Credentials()
