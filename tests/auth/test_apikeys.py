from __future__ import annotations

import re

import pytest

from proxy.auth.apikeys import ApiKeyTable, digest, generate_api_key
from proxy.config.auth import ApiKey
from proxy.core.errors import ConfigError
from proxy.policy.model import Identity

ENV_KEY = "mfd_from-the-environment-0123456789"


def test_a_generated_key_is_found_through_its_stored_form() -> None:
    key, stored = generate_api_key()
    table = ApiKeyTable.from_settings([ApiKey(name="ci", key=stored, roles=("deployer",))], {})
    assert table.lookup(digest(key)) == Identity("ci", frozenset({"deployer"}), "api_key")
    assert table.lookup(digest(key + "x")) is None


def test_generated_keys_are_prefixed_random_and_stored_as_lowercase_sha256() -> None:
    (key1, stored1), (key2, _) = generate_api_key(), generate_api_key()
    assert key1 != key2
    assert re.fullmatch(r"mfd_[A-Za-z0-9_-]{43}", key1)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", stored1)
    assert key1 not in stored1


def test_an_env_key_is_read_from_the_given_environment() -> None:
    table = ApiKeyTable.from_settings([ApiKey(name="laptop", key="env:LAPTOP_KEY")], {"LAPTOP_KEY": ENV_KEY})
    identity = table.lookup(digest(ENV_KEY))
    assert identity is not None
    assert identity.name == "laptop"


def test_an_unset_env_key_is_a_config_error_naming_the_entry() -> None:
    with pytest.raises(ConfigError, match=r"auth\.api_keys\[0\]\.key: environment variable 'NOPE'"):
        ApiKeyTable.from_settings([ApiKey(name="laptop", key="env:NOPE")], {})


def test_a_short_env_key_is_refused_without_being_repeated() -> None:
    with pytest.raises(ConfigError, match="shorter than") as caught:
        ApiKeyTable.from_settings([ApiKey(name="laptop", key="env:K")], {"K": "hunter2"})
    assert "hunter2" not in str(caught.value)


def test_an_env_key_equal_to_a_stored_key_is_refused() -> None:
    key, stored = generate_api_key()
    entries = [ApiKey(name="a", key=stored), ApiKey(name="b", key="env:K")]
    with pytest.raises(ConfigError, match=r"api_keys\[1\]\.key: the same key as auth\.api_keys\[0\]"):
        ApiKeyTable.from_settings(entries, {"K": key})
