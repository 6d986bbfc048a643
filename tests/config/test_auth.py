from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from proxy.config.auth import AuthSettings, JwtIssuer, is_loopback
from tests.auth.keys import SECRET

DIGEST = "sha256:" + "ab" * 32


def problem(model: type[AuthSettings | JwtIssuer], data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return str(caught.value)


def test_a_fresh_config_lets_anonymous_clients_in_with_no_roles() -> None:
    settings = AuthSettings()
    assert settings.anonymous_enabled
    assert settings.anonymous.roles == ()
    assert settings.stdio_identity.name == "stdio"


def test_configuring_any_credential_turns_unset_anonymous_access_off() -> None:
    assert not AuthSettings.model_validate({"api_keys": [{"name": "ci", "key": DIGEST}]}).anonymous_enabled
    assert not AuthSettings.model_validate({"jwt": [{"secret": SECRET}]}).anonymous_enabled


def test_anonymous_access_stays_on_beside_credentials_when_enabled_explicitly() -> None:
    settings = AuthSettings.model_validate(
        {"api_keys": [{"name": "ci", "key": DIGEST}], "anonymous": {"enabled": True, "roles": ["guest"]}}
    )
    assert settings.anonymous_enabled


def test_anonymous_access_is_a_warning_only_off_loopback() -> None:
    settings = AuthSettings()
    assert settings.warnings("127.0.0.1") == []
    assert settings.warnings("::1") == []
    (warning,) = settings.warnings("0.0.0.0")
    assert "without credentials" in warning
    assert AuthSettings.model_validate({"anonymous": {"enabled": False}}).warnings("0.0.0.0") == []


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.0.1", True), ("localhost", True), ("[::1]", True), ("0.0.0.0", False)],
)
def test_loopback_is_recognised_by_address_and_by_name(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_raw_key_in_the_config_is_refused_without_being_repeated() -> None:
    message = problem(AuthSettings, {"api_keys": [{"name": "ci", "key": "mfd_plaintext_key_oops"}]})
    assert "sha256:" in message
    assert "mfd_plaintext_key_oops" not in message


def test_the_same_stored_key_for_two_names_is_refused() -> None:
    message = problem(
        AuthSettings, {"api_keys": [{"name": "a", "key": DIGEST}, {"name": "b", "key": DIGEST}]}
    )
    assert "api_keys[1].key" in message


def test_two_keys_with_one_name_but_other_roles_are_refused() -> None:
    # One name is one identity (keyed ("api_key", "", name)): it cannot hold two role sets.
    keys = [{"name": "ci", "key": DIGEST, "roles": ["reader"]}, {"name": "ci", "key": "env:CI_KEY_2"}]
    message = problem(AuthSettings, {"api_keys": keys})
    assert "api_keys[1].name: 'ci' also names api_keys[0] with other roles" in message


def test_two_keys_of_one_identity_with_the_same_roles_are_a_rotation() -> None:
    keys = [
        {"name": "ci", "key": DIGEST, "roles": ["reader", "ops"]},
        {"name": "ci", "key": "env:CI_KEY_2", "roles": ["ops", "reader"]},
    ]
    assert len(AuthSettings.model_validate({"api_keys": keys}).api_keys) == 2


def test_algorithm_none_cannot_be_configured() -> None:
    assert "'none' is never accepted" in problem(JwtIssuer, {"secret": SECRET, "algorithms": ["none"]})


def test_a_secret_issuer_may_not_list_rs256_and_a_jwks_issuer_may_not_list_hs256() -> None:
    assert "only HS256" in problem(JwtIssuer, {"secret": SECRET, "algorithms": ["RS256"]})
    assert "needs a 'secret'" in problem(JwtIssuer, {"jwks_file": "k.json", "algorithms": ["HS256"]})


def test_a_secret_shorter_than_the_hash_is_refused_without_being_repeated() -> None:
    message = problem(JwtIssuer, {"secret": "short-secret", "algorithms": ["HS256"]})
    assert "at least 32 bytes" in message
    assert "short-secret" not in message


def test_an_issuer_needs_exactly_one_key_source() -> None:
    assert "got none" in problem(JwtIssuer, {"issuer": "x"})
    assert "secret and jwks_url" in problem(JwtIssuer, {"secret": SECRET, "jwks_url": "https://id/jwks"})


def test_algorithms_default_to_the_key_kind() -> None:
    assert JwtIssuer.model_validate({"secret": SECRET}).algorithms == ("HS256",)
    assert JwtIssuer.model_validate({"jwks_file": "k.json"}).algorithms == ("RS256",)


def test_a_jwks_url_must_be_https_unless_it_is_on_loopback() -> None:
    assert "https://" in problem(JwtIssuer, {"jwks_url": "http://id.example.com/jwks"})
    assert JwtIssuer.model_validate({"jwks_url": "http://127.0.0.1:9/jwks"}).jwks_url


def test_two_entries_for_one_issuer_are_refused() -> None:
    entry = {"issuer": "https://id", "secret": SECRET}
    assert "jwt[1].issuer" in problem(AuthSettings, {"jwt": [entry, entry]})


def test_unknown_fields_are_refused() -> None:
    assert "extra" in problem(AuthSettings, {"anonymus": {"enabled": True}}).lower()
