"""RFC 3986 normalization of the URIs clients name: every evasion of a glob gets one spelling."""

from __future__ import annotations

import fnmatch

import pytest

from proxy.core.errors import InvalidParams
from proxy.protocol.uris import normalize_uri, remove_dot_segments

DENY = "file:///secret*"

# What a hostile client sends for file:///secret, and what a server that normalizes would read.
EVASIONS = [
    ("file:///allowed/../secret", "file:///secret"),
    ("file:///allowed/./../secret", "file:///secret"),
    ("file:///%73ecret", "file:///secret"),
    ("file:///%73%65%63%72%65%74", "file:///secret"),
    ("FILE:///secret", "file:///secret"),
    ("File:///secret", "file:///secret"),
    ("file://localhost/secret", "file:///secret"),
    ("file://LOCALHOST/secret", "file:///secret"),
    ("file://localhost/allowed/../secret", "file:///secret"),
    ("file:///allowed/%2e%2e/secret", "file:///secret"),
    ("file:///allowed/%2E%2E/secret", "file:///secret"),
    ("file:///allowed/.%2e/secret", "file:///secret"),
    ("file:///allowed/%2e./secret", "file:///secret"),
    ("file:///../../../secret", "file:///secret"),
    ("file:/secret", "file:///secret"),
    ("file:/allowed/../secret", "file:///secret"),
    ("file:////secret", "file:///secret"),
    ("file:///allowed//..//secret", "file:///secret"),
    ("file:///./secret", "file:///secret"),
    ("file:///allowed/%2e%2E/secret", "file:///secret"),
    ("fIlE://LocalHost/allowed/%2E./%73ecret", "file:///secret"),
]


@pytest.mark.parametrize(("evasion", "normal"), EVASIONS)
def test_every_spelling_of_a_denied_uri_normalizes_to_the_one_the_deny_glob_matches(
    evasion: str, normal: str
) -> None:
    assert not fnmatch.fnmatchcase(evasion, DENY)  # the raw spelling slipped past the glob
    assert normalize_uri(evasion) == normal
    assert fnmatch.fnmatchcase(normalize_uri(evasion), DENY)


@pytest.mark.parametrize(
    ("uri", "normal"),
    [
        ("HTTP://Example.COM", "http://example.com/"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:/a", "https://example.com/a"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("http://Ex%41mple.com/", "http://example.com/"),
        ("http://User@Example.com/", "http://User@example.com/"),  # userinfo keeps its case
        ("http://[::1]:80/", "http://[::1]/"),
        ("http://[FE80::1]/", "http://[fe80::1]/"),
        ("note://r1/%7etopic", "note://r1/~topic"),
        ("note://r1/a%c3%a9", "note://r1/a%C3%A9"),  # not unreserved: kept encoded, hex upper-cased
        ("note://r1/a?x=%2f&y=%7e#%7e", "note://r1/a?x=%2F&y=~#~"),  # query: escapes only
        ("note://r1/a?x=../b", "note://r1/a?x=../b"),  # the query is not a path
        ("s3://b//k", "s3://b//k"),  # empty segments mean something outside file:
        ("mailto:Ann@Example.com", "mailto:Ann@Example.com"),
        ("urn:isbn:0451450523", "urn:isbn:0451450523"),
        ("note://r1/static", "note://r1/static"),
        ("file:///secret/%6b%65%79", "file:///secret/key"),
        ("file:///a%2a%2A", "file:///a%2A%2A"),
        ("file:///100%25", "file:///100%25"),
        ("file:///100%25done", "file:///100%25done"),
        ("note://r1/dir/", "note://r1/dir/"),
        ("note://r1/dir/.", "note://r1/dir/"),
        ("note://r1/dir/..", "note://r1/"),
        ("relative/../path", "path"),
        ("file:///C:/Users/../x", "file:///C:/x"),
        ("file://server/share/../x", "file://server/x"),  # a UNC host is not localhost
    ],
)
def test_syntax_based_normalization(uri: str, normal: str) -> None:
    assert normalize_uri(uri) == normal


@pytest.mark.parametrize("uri", [normal for _, normal in EVASIONS] + ["HTTP://A.b:80", "note://x/%7e%2F?q"])
def test_normalizing_twice_changes_nothing(uri: str) -> None:
    try:
        once = normalize_uri(uri)
    except InvalidParams:
        return
    assert normalize_uri(once) == once


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("file:///allowed%2F..%2Fsecret", "encoded '/' (%2F)"),
        ("file:///allowed%2f..%2fsecret", "encoded '/' (%2F)"),
        ("file:///secret%2Fkey", "encoded '/' (%2F)"),
        ("file:///allowed/..%5Csecret", "encoded '\\' (%5C)"),
        ("file:///allowed\\..\\secret", "'\\'"),
        ("file:///secret%00.txt", "encoded NUL (%00)"),
        ("file:///allowed%252F..%252Fsecret", "double-encoded '%252F'"),
        ("file:///allowed/%252e%252e/secret", "double-encoded '%252e'"),
        ("file:///allowed%255c..", "double-encoded"),
        ("file:///%zzsecret", "invalid percent-encoding"),
        ("file:///secret%4", "invalid percent-encoding"),
        ("file:///secret%", "invalid percent-encoding"),
        ("file:///se\ncret", "control characters"),
        ("file:///se\x00cret", "control characters"),
        ("x:/..//evil", "begins with '//'"),
    ],
)
def test_what_no_normalization_can_make_safe_is_refused_naming_the_problem(uri: str, says: str) -> None:
    with pytest.raises(InvalidParams) as refused:
        normalize_uri(uri)
    assert says in str(refused.value)
    assert refused.value.code == -32602


@pytest.mark.parametrize(
    ("path", "removed"),
    [  # RFC 3986 §5.2.4 and §5.4's examples
        ("/a/b/c/./../../g", "/a/g"),
        ("mid/content=5/../6", "mid/6"),
        ("/b/c/./g", "/b/c/g"),
        ("/b/c/../g", "/b/g"),
        ("/b/c/../..", "/"),
        ("/b/c/.", "/b/c/"),
        ("/../g", "/g"),
        ("/b/g..", "/b/g.."),
        ("/b/..g", "/b/..g"),
        ("/b/.g", "/b/.g"),
        ("", ""),
    ],
)
def test_dot_segments_are_removed_as_the_rfc_says(path: str, removed: str) -> None:
    assert remove_dot_segments(path) == removed


def test_a_uri_as_long_as_the_limit_normalizes_in_linear_time() -> None:
    """64 KiB of dot segments, escapes and slashes: done at once, not in quadratic time."""
    uri = "file:///" + "a/../%2e/%41/" * 5000 + "x" * 1000
    assert normalize_uri(uri).endswith("x" * 1000)
    assert normalize_uri("file:///" + "../" * 20000 + "secret") == "file:///secret"
    with pytest.raises(InvalidParams):
        normalize_uri("file:///" + "%" * 65536)
