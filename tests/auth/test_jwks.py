from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.auth.authenticator import Authenticated, Authenticator, Rejected
from proxy.auth.jwks import JwksError, JwksFile, JwksUrl, KeySet, fetch_url
from proxy.config.auth import AuthSettings
from proxy.core.errors import ConfigError
from tests.auth.keys import AUDIENCE, ISSUER, JwksServer, claims, jwks, public_jwk, rsa_key, serving, sign

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server() -> AsyncIterator[tuple[JwksServer, str]]:
    jwks_server = JwksServer(jwks(public_jwk(rsa_key("a"), "a")))
    async with serving(jwks_server) as url:
        yield jwks_server, url


def url_authenticator(url: str) -> Authenticator:
    issuer = {"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": url}
    return Authenticator.from_settings(AuthSettings.model_validate({"jwt": [issuer]}), {})


def token(kid: str) -> dict[str, str]:
    return {"authorization": "Bearer " + sign(claims(), rsa_key(kid), "RS256", kid=kid)}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_an_rs256_token_is_verified_with_keys_fetched_from_a_jwks_url(
    server: tuple[JwksServer, str],
) -> None:
    jwks_server, url = server
    auth = url_authenticator(url)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(auth.run)
        assert jwks_server.hits == 1
        result = await auth.authenticate(token("a"))
        tg.cancel_scope.cancel()
    assert isinstance(result, Authenticated)
    assert result.identity.name == "alice"
    assert jwks_server.hits == 1  # the request itself went to no network


async def test_a_rotated_key_is_found_by_one_refetch_on_its_unknown_kid(
    server: tuple[JwksServer, str],
) -> None:
    jwks_server, url = server
    auth = url_authenticator(url)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(auth.run)
            jwks_server.document = jwks(public_jwk(rsa_key("a"), "a"), public_jwk(rsa_key("b"), "b"))
            result = await auth.authenticate(token("b"))
        tg.cancel_scope.cancel()
    assert isinstance(result, Authenticated)
    assert jwks_server.hits == 2


async def test_unknown_kids_refetch_at_most_once_per_interval(server: tuple[JwksServer, str]) -> None:
    jwks_server, url = server
    clock = Clock()
    keys = JwksUrl(url, refetch_interval=60, clock=clock)
    with anyio.fail_after(10):
        assert await keys.key("made-up-1") is None
        assert await keys.key("made-up-2") is None
        assert jwks_server.hits == 1
        clock.now += 60
        assert await keys.key("made-up-3") is None
    assert jwks_server.hits == 2


async def test_concurrent_requests_for_a_new_kid_share_one_refetch(server: tuple[JwksServer, str]) -> None:
    jwks_server, url = server
    keys = JwksUrl(url, clock=Clock())
    found: list[bool] = []

    async def look_up() -> None:
        found.append(await keys.key("a") is not None)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(look_up)
    assert found == [True] * 5
    assert jwks_server.hits == 1


async def test_a_failed_refresh_keeps_the_keys_it_had(server: tuple[JwksServer, str]) -> None:
    jwks_server, url = server
    keys = JwksUrl(url, clock=Clock())
    with anyio.fail_after(10):
        assert await keys.refresh()
        jwks_server.status = 500
        assert not await keys.refresh()
        assert await keys.key("a") is not None


async def test_the_background_refresh_replaces_the_keys(server: tuple[JwksServer, str]) -> None:
    jwks_server, url = server
    second_refresh_done = anyio.Event()

    async def fetch(address: str) -> bytes:
        if jwks_server.hits == 1:  # the second refresh: the issuer has rotated by now
            jwks_server.document = jwks(public_jwk(rsa_key("b"), "b"))
        elif jwks_server.hits == 2:  # the third: the second has replaced the keys
            second_refresh_done.set()
        return await fetch_url(address)

    keys = JwksUrl(url, fetch=fetch, refresh=0.01, refetch_interval=3600, clock=Clock())
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(keys.run)
            await second_refresh_done.wait()
        tg.cancel_scope.cancel()
    jwks_server.document = jwks()  # so a refetch on an unknown kid could not find "b" either
    assert await keys.key("b") is not None


async def test_tokens_are_refused_while_the_jwks_url_is_unreachable() -> None:
    async with serving(JwksServer()) as url:
        pass  # the port is free again: nothing listens there now
    auth = url_authenticator(url)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(20):
            await tg.start(auth.run)  # ready anyway: API-key clients must not wait for the IdP
            result = await auth.authenticate(token("a"))
        tg.cancel_scope.cancel()
    assert isinstance(result, Rejected)
    assert "kid" in result.message


async def test_fetching_a_missing_jwks_is_an_error_naming_the_status(server: tuple[JwksServer, str]) -> None:
    jwks_server, url = server
    jwks_server.status = 404
    with anyio.fail_after(10), pytest.raises(JwksError, match="HTTP 404"):
        await fetch_url(url)


async def test_a_jwks_file_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(public_jwk(rsa_key("a"), "a"))))
    keys = JwksFile(str(path), clock=Clock())
    assert await keys.key("b") is None
    path.write_text(json.dumps(jwks(public_jwk(rsa_key("a"), "a"), public_jwk(rsa_key("b"), "b"))))
    os.utime(path, ns=(0, 1))  # a distinct mtime, however coarse the file system's clock is
    assert await keys.key("b") is not None


async def test_a_broken_rewrite_of_the_jwks_file_keeps_the_old_keys(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(public_jwk(rsa_key("a"), "a"))))
    keys = JwksFile(str(path), check_interval=0, clock=Clock())
    path.write_text("{ half-written")
    assert await keys.key("a") is not None


def test_an_unreadable_jwks_file_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    issuer: dict[str, Any] = {"jwks_file": str(tmp_path / "missing.json")}
    with pytest.raises(ConfigError, match=r"auth\.jwt\[0\]\.jwks_file: .*missing\.json"):
        Authenticator.from_settings(AuthSettings.model_validate({"jwt": [issuer]}), {})


def test_a_document_without_keys_is_not_a_jwks() -> None:
    with pytest.raises(JwksError, match="no 'keys' list"):
        KeySet.parse(b'{"kty": "RSA"}', "test")


async def test_a_key_set_that_does_not_answer_is_not_asked_again_by_each_token_and_says_why() -> None:
    asked: list[str] = []

    async def hanging(url: str) -> bytes:
        asked.append(url)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    now = [0.0]
    keys = JwksUrl("https://id.example.test/jwks", fetch=hanging, timeout=0.05, clock=lambda: now[0])
    assert not await keys.refresh()
    assert keys.failure == "https://id.example.test/jwks: no answer in 0.05 s"  # before: ""
    with anyio.fail_after(1):
        for _ in range(20):  # tokens naming unknown keys meanwhile: told at once, none refetches
            assert await keys.key("k-new") is None
    assert len(asked) == 1
    now[0] = 61.0
    assert await keys.key("k-new") is None  # a minute later, one request may try again
    assert len(asked) == 2
