"""``manifold credentials revoke`` of an ``oauth`` server, against a real authorization server
(oidc-provider): the tokens are revoked with the dynamically registered client that got them
(the one the store keeps), never with a client registered to revoke; a refusal is reported
(exit 3, the server's error) and the tokens are forgotten here all the same."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from proxy.config.credentials import CredentialStoreSettings
from proxy.credentials.oauth_client import OAuthHttp
from proxy.credentials.on_behalf import OAuthServer, OnBehalf
from proxy.credentials.revoke import RevokeTarget, revoke_kept
from proxy.credentials.sealing import new_key
from proxy.credentials.store import SecretStore
from proxy.credentials.stores import open_store
from proxy.credentials.token_modes import CLIENT_KIND, StoreClients, StoreTokens
from proxy.credentials.tokens import MemoryVault, Pending, Sealer
from proxy.policy.model import Identity
from tests.credentials.world import REPO, Browser, World, world
from tests.interaction.harness import MANIFOLD, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# Where the provider sends the browser back; the CLI below has no listen.port in its file, so it
# derives another callback URL (127.0.0.1:8080): before, it registered a client for that one.
CALLBACK = "http://127.0.0.1:9/oauth/callback"
IDP = "https://idp.example"


@dataclass
class Rig:
    world: World
    store: SecretStore
    settings: dict[str, Any]  # the credentials section, as in a config file
    flow: OnBehalf


@pytest.fixture(scope="module")
async def rig(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    tmp = tmp_path_factory.mktemp("revoke")
    async with world(tmp, redirect_uri=CALLBACK) as running:
        settings = {"store": "file", "path": str(tmp / "credentials.json"), "key": new_key()}
        store = open_store(CredentialStoreSettings.model_validate(settings), redis_url="redis://unused")
        key = os.urandom(32)
        flow = OnBehalf(
            {"guarded": OAuthServer("guarded", running.servers["guarded"], scope="offline_access mcp:tools")},
            StoreTokens(store),
            Pending(MemoryVault(), Sealer(key)),
            callback_url=CALLBACK,
            clients=StoreClients(store),  # dynamic registration, kept in the store
        )
        try:
            yield Rig(running, store, settings, flow)
        finally:
            await store.aclose()


def person(name: str) -> Identity:
    return Identity(name, frozenset(), "oauth", IDP, name)


async def sign_in(flow: OnBehalf, identity: Identity) -> None:
    started = await flow.begin(identity, "guarded")
    browser = Browser(identity.subject)
    await browser.authorize(started.authorize, stop_at=CALLBACK)
    name, value = flow.cookie(started.state)
    await flow.complete(browser.landed, {name: value})


async def registered(store: SecretStore) -> list[dict[str, Any]]:
    found = []
    for entry in await store.entries():
        if entry.kind == CLIENT_KIND:
            found.append(json.loads(await store.get(CLIENT_KIND, entry.server, entry.holder) or "{}"))
    return found


async def refresh_status(rig: Rig, refresh_token: str, client: dict[str, Any]) -> int:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    auth = {"Authorization": aiohttp.encode_basic_auth(client["client_id"], client["client_secret"])}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{rig.world.issuer}/token", data=form, headers=auth) as got,
    ):
        return got.status


async def cli_revoke(rig: Rig, tmp_path: Path, name: str) -> tuple[int, str, str]:
    config = write_config(
        tmp_path / "manifold.yaml",
        {
            "credentials": rig.settings,
            "servers": {
                "guarded": {
                    "url": rig.world.servers["guarded"],
                    "credentials": {"mode": "oauth", "scopes": ["offline_access", "mcp:tools"]},
                }
            },
        },
    )
    args = ["--server", "guarded", "--identity", name, "--source", "oauth", "--issuer", IDP]
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [*MANIFOLD, "credentials", "revoke", "--config", str(config), *args],
            check=False,
            cwd=REPO,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_revoke_uses_the_client_that_got_the_tokens_and_registers_none(
    rig: Rig, tmp_path: Path
) -> None:
    alice = person("alice")
    await sign_in(rig.flow, alice)
    kept = await StoreTokens(rig.store).get(alice.key, "guarded")
    [client] = await registered(rig.store)
    assert kept is not None
    assert kept.client_id == client["client_id"]  # recorded, to revoke with
    assert kept.refresh_token is not None
    code, out, err = await cli_revoke(rig, tmp_path, "alice")
    assert code == 0, out + err
    assert "NOT revoked" not in err
    # oidc-provider revokes the refresh token (the grant) but not a JWT access token: said so.
    assert out.startswith("revoked oauth of alice (oauth) to server guarded (the access token itself")
    assert await refresh_status(rig, kept.refresh_token, client) == 400  # revoked at the provider
    assert await registered(rig.store) == [client]  # nothing registered to revoke


async def test_a_refused_revocation_is_reported_and_the_tokens_are_forgotten_here_anyway(
    rig: Rig, tmp_path: Path
) -> None:
    bob = person("bob")
    await sign_in(rig.flow, bob)
    kept = await StoreTokens(rig.store).get(bob.key, "guarded")
    assert kept is not None
    [entry] = [e for e in await rig.store.entries() if e.kind == CLIENT_KIND]
    [client] = await registered(rig.store)
    # The kept client's secret no longer what the provider knows: it refuses the revocation.
    wrong = json.dumps({"client_id": client["client_id"], "client_secret": "not-the-secret"})
    await rig.store.put(CLIENT_KIND, entry.server, entry.holder, wrong)
    try:
        code, out, err = await cli_revoke(rig, tmp_path, "bob")
    finally:
        await rig.store.put(CLIENT_KIND, entry.server, entry.holder, json.dumps(client))
    assert code == 3, out + err  # before: 0 and "revoked …"
    assert "forgotten here: oauth of bob (oauth) to server guarded" in out
    assert "NOT revoked at the authorization server" in err
    assert "invalid_client" in err  # the authorization server's own error
    assert await StoreTokens(rig.store).get(bob.key, "guarded") is None
    assert kept.refresh_token is not None
    assert await refresh_status(rig, kept.refresh_token, client) == 200  # still valid there, as said


async def test_revoke_kept_says_when_the_client_that_got_the_tokens_is_unknown(rig: Rig) -> None:
    carol = person("carol")
    await sign_in(rig.flow, carol)
    target = RevokeTarget(
        "guarded", rig.world.servers["guarded"], client_id="someone-else", client_secret="x"
    )
    kept = await StoreTokens(rig.store).get(carol.key, "guarded")
    assert kept is not None
    # Configured client_id differs from the one the tokens were granted to, and none kept matches.
    [entry] = [e for e in await rig.store.entries() if e.kind == CLIENT_KIND]
    await rig.store.delete(CLIENT_KIND, entry.server, entry.holder)
    revocation = await revoke_kept(rig.store, target, carol.key, http=OAuthHttp())
    assert revocation.problem is not None
    assert "neither configured nor kept" in revocation.problem
