from __future__ import annotations

import base64
import json

import pytest

from tests.guard.detect.helpers import crc_token, detectors, found

GITHUB = crc_token("ghp_", "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy")
NPM = crc_token("npm_", "Zy9xWv8uTs7rQp6oNm5lKj4iHg3fEd")


def b64(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


SIGNATURE = "c2lnbmF0dXJlLWJ5dGVzLWhlcmUtMTIzNDU2Nzg5MA"
JWT = f"{b64({'alg': 'HS256', 'typ': 'JWT'})}.{b64({'sub': '42', 'name': 'Ann'})}.{SIGNATURE}"
DISCORD_USER = base64.urlsafe_b64encode(b"123456789012345678").rstrip(b"=").decode()

POSITIVES = [
    ("aws_access_key", "AKIAQ3EGZ5TJ7LMB4XHN"),
    ("gcp_api_key", "AIzaSyD3x9Kq2LmN8pQr5StUv7WxYz0aBcDeFgH"),
    ("github_token", GITHUB),
    (
        "github_token",
        "github_pat_11ABCDEFG0123456789abc_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V2w3X4y5Z6a7B8c9D",
    ),
    ("gitlab_token", "glpat-x9Kq2LmN8pQr5StUv7Wx"),
    ("slack_token", "xoxb-12345678901-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("slack_webhook", "https://hooks.slack.com/services/T0123ABCD/B0456EFGH7/AbCdEfGhIjKlMnOpQrStUvWx"),
    ("discord_token", f"{DISCORD_USER}.GbCdEf.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    (
        "discord_webhook",
        "https://discord.com/api/webhooks/123456789012345678/"
        + "a" * 30
        + "B9c8D7e6F5g4H3i2J1k0L9m8N7o6P5q4R3s2",
    ),
    ("stripe_key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("twilio_key", "SK0123456789abcdef0123456789abcdef"),
    ("sendgrid_key", "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"),
    (
        "openai_key",
        "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy" * 2 + "T3BlbkFJ" + "Zy9xWv8uTs7rQp6oNm5lKj4iHg3fEd" * 2,
    ),
    ("anthropic_key", "sk-ant-api03-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy" * 3 + "Zy9AA"),
    ("huggingface_token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"),
    ("npm_token", NPM),
    ("pypi_token", "pypi-AgEIcHlwaS5vcmc" + "CJGM0ZjE5YjYxLTk3ZDctNGJhNi1hNjQyLWM3MTk1OTJkNjIzZAACKlsz"),
    ("jwt", JWT),
]


@pytest.mark.parametrize(("detector", "value"), POSITIVES)
def test_each_provider_key_is_found_by_its_own_detector_with_its_exact_span(
    detector: str, value: str
) -> None:
    assert found(f"the key is {value}. ok", kind="result") == [(detector, value)]


@pytest.mark.parametrize(
    "text",
    [
        "AWS documents AKIAIOSFODNN7EXAMPLE as its example key id.",
        "export GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "stripe.api_key = 'sk_test_XXXXXXXXXXXXXXXXXXXXXXXX'",
        "commit 3f9a1c7e2b4d6f8a0c1e3b5d7f9a2c4e6b8d0f1a and uuid 550e8400-e29b-41d4-a716-446655440000",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "pk_live_51H8exampleexample is a publishable key",
        "hf_hub_download(repo_id='bert-base-uncased')",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    ],
)
def test_hashes_ids_public_material_and_placeholders_are_not_secrets(text: str) -> None:
    assert not {d for d in detectors(text) if d != "email"} & {
        "aws_access_key", "github_token", "stripe_key", "huggingface_token", "private_key", "generic_secret"
    }  # fmt: skip


def test_a_github_shaped_token_with_a_wrong_checksum_is_not_a_token() -> None:
    broken = GITHUB[:-1] + ("A" if GITHUB[-1] != "A" else "B")
    assert "github_token" not in detectors(broken)


def test_a_jwt_needs_a_header_naming_alg() -> None:
    fake = f"{b64({'typ': 'JWT'})}.{b64({'sub': '1'})}.c2lnbmF0dXJl"
    assert "jwt" not in detectors(fake)


def test_a_discord_shaped_token_whose_head_is_not_a_user_id_is_not_a_token() -> None:
    head = base64.urlsafe_b64encode(b"not-a-user-id-at-all").rstrip(b"=").decode()
    assert "discord_token" not in detectors(f"{head}.GbCdEf.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789")


def test_a_private_key_block_is_one_finding_even_when_json_escaped_or_cut_short() -> None:
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nAKIAQ3EGZ5TJ7LMB4XHN\n"
    block += "-----END RSA PRIVATE KEY-----"
    assert found(block) == [("private_key", block)]
    escaped = block.replace("\n", "\\n")
    assert found(f'{{"private_key": "{escaped}"}}') == [("private_key", escaped)]
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB"
    assert [d for d, _ in found(cut)] == ["private_key"]


def test_aws_secret_keys_and_azure_keys_are_found_in_their_assignments() -> None:
    secret = "wJa1rXUtnFEMI/K7MDENG/bPxRfiCYzQ9dLkT2pH"
    assert ("aws_secret_key", secret) in found(f"aws_secret_access_key = {secret}")
    key = (
        "Q" * 2
        + "x9Kq2LmN8pQr5StUv7WxYz0aBcDeFgH1jK3lM5nO7pQ9rS1tU3vW5xY7zA9bC1dE3fG5hI7jK9lM1nO3pQ5rS7tU9v"[:84]
        + "=="
    )
    text = f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={key};EndpointSuffix=core.windows.net"
    assert ("azure_storage_key", key) in found(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('password = "k9#Lm2$pQ7vX"', "k9#Lm2$pQ7vX"),
        ("DB_PASSWORD=Zt8!qW3rE6yU1i", "Zt8!qW3rE6yU1i"),
        ('{"client_secret": "a8F3kL0pQ2zX9mN4"}', "a8F3kL0pQ2zX9mN4"),
        ("<password>Hq7#Lp2!Vz9k</password>", "Hq7#Lp2!Vz9k"),
        ("--token Rt5yU8iO1pA4sD7f", "Rt5yU8iO1pA4sD7f"),
    ],
)
def test_generic_assignments_with_random_values_are_secrets(text: str, value: str) -> None:
    assert found(text) == [("generic_secret", value)]


@pytest.mark.parametrize(
    "text",
    [
        'password = os.environ["DB_PASSWORD"]',
        "password: ********",
        "api_key: <YOUR_API_KEY>",
        "token = get_token(session)",
        "SECRET_KEY = settings.SECRET_KEY",
        "password=changeme",
        "The password field must be at least 12 characters long.",
        "A short base64 token: FWnIe4PPxzdANRrmBgiAzejGBIMLSQoI in prose",
    ],
)
def test_generic_assignments_of_code_placeholders_or_prose_are_not(text: str) -> None:
    assert "generic_secret" not in detectors(text)


def test_a_named_secret_is_not_also_a_generic_one() -> None:
    assert found(f"token: {GITHUB}") == [("github_token", GITHUB)]
