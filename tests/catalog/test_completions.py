"""Completion values of a resource template, decided on as the URIs they fill it in to."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

from proxy.catalog.completions import completion_uri, filter_completion
from proxy.catalog.uri_templates import expand

VALUES = {"var": "value", "hello": "Hello World!", "path": "/foo/bar", "x": "1024", "y": "768", "empty": ""}


@pytest.mark.parametrize(
    ("template", "expanded"),
    [  # RFC 6570's own examples (§1.2, §3.2)
        ("{var}", "value"),
        ("{hello}", "Hello%20World%21"),
        ("{+hello}", "Hello%20World!"),
        ("{+path}/here", "/foo/bar/here"),
        ("{path}/here", "%2Ffoo%2Fbar/here"),
        ("{#hello}", "#Hello%20World!"),
        ("X{.var}", "X.value"),
        ("{/var,x}/here", "/value/1024/here"),
        ("{;x,y,empty}", ";x=1024;y=768;empty"),
        ("{?x,y,empty}", "?x=1024&y=768&empty="),
        ("?fixed=yes{&x}", "?fixed=yes&x=1024"),
        ("{var:3}", "val"),
        ("{undef}", ""),
        ("{x,undef,y}", "1024,768"),
        ("file:///{+path}", "file:////foo/bar"),
        ("{+path}%20", "/foo/bar%20"),
    ],
)
def test_a_template_expands_as_rfc_6570_says(template: str, expanded: str) -> None:
    assert expand(template, VALUES) == expanded


def test_a_reserved_expansion_keeps_a_triplet_and_encodes_a_bare_percent() -> None:
    assert expand("{+v}", {"v": "a%2Fb%zz"}) == "a%2Fb%25zz"


def complete(argument: str, value: str, **chosen: str) -> dict[str, Any]:
    params: dict[str, Any] = {"argument": {"name": argument, "value": value}}
    if chosen:
        params["context"] = {"arguments": chosen}
    return params


def answer(*values: Any, total: int | None = None) -> dict[str, Any]:
    completion: dict[str, Any] = {"values": list(values), "hasMore": False}
    if total is not None:
        completion["total"] = total
    return {"completion": completion}


def not_secret(uri: str) -> bool:
    return not fnmatch.fnmatchcase(uri, "file:///secret*")


def test_the_uri_a_value_addresses_fills_in_the_chosen_arguments_and_leaves_the_rest_out() -> None:
    assert completion_uri("file:///{dir}/{name}", complete("dir", "s"), "secret") == "file:///secret/"
    assert completion_uri("file:///{dir}/{name}", complete("name", "k", dir="secret"), "key") == (
        "file:///secret/key"
    )
    assert completion_uri("file:///{+path}", complete("path", "se"), "secret/a.txt") == "file:///secret/a.txt"


def test_values_whose_uri_the_caller_may_not_read_are_left_out_and_not_counted() -> None:
    result = filter_completion(
        answer("docs/a.txt", "secret/b.txt", "secret", "docs/c.txt", total=10),
        "file:///{+path}",
        complete("path", ""),
        not_secret,
    )
    assert result == {"completion": {"values": ["docs/a.txt", "docs/c.txt"], "hasMore": False, "total": 8}}


def test_a_template_every_value_of_which_is_denied_completes_to_nothing() -> None:
    result = filter_completion(answer("a", "b"), "file:///secret/{name}", complete("name", ""), not_secret)
    assert result["completion"]["values"] == []


def test_an_answer_with_nothing_to_leave_out_is_passed_on_as_it_came() -> None:
    given = answer("docs/a.txt", total=1)
    assert filter_completion(given, "file:///{+path}", complete("path", "d"), not_secret) is given


def test_values_that_cannot_be_judged_are_left_out() -> None:
    mixed = filter_completion(answer("docs", 7, None), "file:///{+path}", complete("path", ""), not_secret)
    assert mixed["completion"]["values"] == ["docs"]
    shapeless = {"completion": {"values": {"secret": 1}, "hasMore": True}}
    assert filter_completion(shapeless, "file:///{+path}", complete("path", ""), not_secret) == {
        "completion": {"values": [], "hasMore": False}
    }
