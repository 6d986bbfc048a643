"""The credential stores: the sealed file (shared by the CLI and a running server) and the
environment, attacked with oversized, forged and colliding entries."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import orjson
import pytest

from proxy.config.credentials import CredentialStoreSettings, decode_key
from proxy.credentials.sealing import Sealer, Unsealable, new_key
from proxy.credentials.store import EnvStore, FileStore, StoreError, StoreReadOnly
from proxy.credentials.stores import open_store

pytestmark = pytest.mark.anyio

ALICE = ("api_key", "", "alice")
BOB = ("api_key", "", "bob")
ALICE_OF_IDP = ("jwt", "https://id.example.com", "alice")


def file_store(path: Path, key: str | None = None, **settings: object) -> FileStore:
    key = key or new_key()
    options = CredentialStoreSettings.model_validate({"path": str(path), "key": key, **settings})
    return FileStore(str(path), Sealer(decode_key(key)), options)


async def test_a_kept_secret_is_read_back_by_another_store_on_the_same_file_and_key(tmp_path: Path) -> None:
    key = new_key()
    writer, reader = file_store(tmp_path / "c.json", key), file_store(tmp_path / "c.json", key)
    assert await reader.get("secret", "gh", ALICE) is None
    await writer.put("secret", "gh", ALICE, "ghp_alice-token")
    await writer.put("secret", "gh", ALICE_OF_IDP, "ghp_other-alice")
    assert await reader.get("secret", "gh", ALICE) == "ghp_alice-token"
    assert await reader.get("secret", "gh", ALICE_OF_IDP) == "ghp_other-alice"  # not the same alice
    assert await reader.get("secret", "gh", BOB) is None
    assert await reader.get("secret", "gl", ALICE) is None


async def test_the_file_is_sealed_and_private(tmp_path: Path) -> None:
    store = file_store(tmp_path / "c.json")
    await store.put("secret", "gh", ALICE, "ghp_alice-token")
    raw = (tmp_path / "c.json").read_bytes()
    assert b"ghp_alice-token" not in raw
    assert orjson.loads(raw)["entries"][0].keys() == {
        "kind",
        "server",
        "source",
        "issuer",
        "subject",
        "sealed",
    }
    assert stat.S_IMODE(os.stat(tmp_path / "c.json").st_mode) == 0o600


async def test_a_revoke_and_a_replacement_are_seen_by_the_next_lookup(tmp_path: Path) -> None:
    key = new_key()
    writer, reader = file_store(tmp_path / "c.json", key), file_store(tmp_path / "c.json", key)
    await writer.put("secret", "gh", ALICE, "first-token")
    assert await reader.get("secret", "gh", ALICE) == "first-token"
    await writer.put("secret", "gh", ALICE, "other-token")  # same length: a new file all the same
    assert await reader.get("secret", "gh", ALICE) == "other-token"
    assert await writer.delete("secret", "gh", ALICE)
    assert await reader.get("secret", "gh", ALICE) is None
    assert not await writer.delete("secret", "gh", ALICE)


async def test_an_entry_under_another_key_does_not_open(tmp_path: Path) -> None:
    await file_store(tmp_path / "c.json").put("secret", "gh", ALICE, "ghp_alice-token")
    with pytest.raises(Unsealable):
        await file_store(tmp_path / "c.json").get("secret", "gh", ALICE)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "empty"),
        ("x" * 17, "longer than credentials.max_secret_bytes (16)"),
        ("token\r\nX-Evil: 1", "control characters"),
        ("tok\x00en", "control characters"),
    ],
)
async def test_a_secret_that_would_forge_a_header_or_is_too_long_is_refused(
    tmp_path: Path, value: str, problem: str
) -> None:
    store = file_store(tmp_path / "c.json", max_secret_bytes=16)
    with pytest.raises(ValueError, match="secret") as refused:
        await store.put("secret", "gh", ALICE, value)
    assert problem in str(refused.value)
    assert not (tmp_path / "c.json").exists()


async def test_no_more_entries_than_the_bound_and_none_for_anonymous(tmp_path: Path) -> None:
    store = file_store(tmp_path / "c.json", max_entries=1)
    await store.put("secret", "gh", ALICE, "alice-token")
    await store.put("secret", "gh", ALICE, "alice-token-2")  # a replacement is no new entry
    with pytest.raises(ValueError, match=r"credentials.max_entries \(1\)"):
        await store.put("secret", "gh", BOB, "bob-token")
    with pytest.raises(ValueError, match="anonymous"):
        await store.put("secret", "gh", ("anonymous", "", "anonymous"), "anon-token")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "is not JSON"),
        (b"[]", "no 'entries' list"),
        (b'{"entries": [{"kind": "secret"}]}', "entry 0 is malformed"),
    ],
)
async def test_a_broken_file_is_a_store_error_that_names_the_problem(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "c.json").write_bytes(content)
    with pytest.raises(StoreError, match=problem):
        await file_store(tmp_path / "c.json").get("secret", "gh", ALICE)


async def test_entries_are_listed_without_values(tmp_path: Path) -> None:
    store = file_store(tmp_path / "c.json")
    await store.put("secret", "gh", ALICE, "alice-token")
    await store.put("oauth", "gh", ALICE_OF_IDP, "a-refresh-token")
    listed = await store.entries()
    assert sorted((e.kind, e.server, e.holder) for e in listed) == [
        ("oauth", "gh", ALICE_OF_IDP),
        ("secret", "gh", ALICE),
    ]


async def test_the_environment_names_one_entry_per_variable_for_config_vouched_holders_only() -> None:
    environ = {
        "MCP_SECRET__gh__alice": "alice-env-token",
        "MCP_SECRET__gh__a__b": "ambiguous-token",
        "MCP_SECRET__gh__bad": "line\nbreak",
    }
    store = EnvStore("MCP_SECRET__", environ)
    assert await store.get("secret", "gh", ALICE) == "alice-env-token"
    assert await store.get("secret", "gh", ("stdio", "", "alice")) == "alice-env-token"
    # A token's alice is not the config's alice; "__" would make one variable name two entries.
    assert await store.get("secret", "gh", ALICE_OF_IDP) is None
    assert await store.get("secret", "gh", ("api_key", "", "a__b")) is None
    assert await store.get("secret", "gh__a", ("api_key", "", "b")) is None
    assert await store.get("oauth", "gh", ALICE) is None
    with pytest.raises(StoreError, match="control characters"):
        await store.get("secret", "gh", ("api_key", "", "bad"))
    with pytest.raises(StoreReadOnly):
        await store.put("secret", "gh", ALICE, "x" * 10)


def test_a_sealed_store_without_a_key_cannot_be_opened() -> None:
    with pytest.raises(StoreError, match=r"credentials\.key is required"):
        open_store(CredentialStoreSettings(store="file"), redis_url="redis://127.0.0.1:1/0")
    assert isinstance(open_store(CredentialStoreSettings(store="env"), redis_url="redis://x/0"), EnvStore)
