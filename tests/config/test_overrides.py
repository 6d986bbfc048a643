"""Environment overrides derived from a model: any model, any depth, nothing listed twice."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from proxy.config.overrides import Setting, overridable, read_overrides
from proxy.core.errors import ConfigError


class Inner(BaseModel):
    level: int = 0
    tags: tuple[str, ...] = ()
    note: str | None = None


class Outer(BaseModel):
    name: str = ""
    inner: Inner = Inner()
    maybe: Inner | None = None
    hidden: dict[str, str] = {}


def test_every_field_at_every_depth_is_a_setting_except_the_excluded() -> None:
    assert overridable(Outer, prefix="APP_", exclude={"hidden"}) == [
        Setting("APP_NAME", ("name",), section=False),
        Setting("APP_INNER", ("inner",), section=True),
        Setting("APP_INNER__LEVEL", ("inner", "level"), section=False),
        Setting("APP_INNER__TAGS", ("inner", "tags"), section=False),
        Setting("APP_INNER__NOTE", ("inner", "note"), section=False),
        Setting("APP_MAYBE", ("maybe",), section=True),
        Setting("APP_MAYBE__LEVEL", ("maybe", "level"), section=False),
        Setting("APP_MAYBE__TAGS", ("maybe", "tags"), section=False),
        Setting("APP_MAYBE__NOTE", ("maybe", "note"), section=False),
    ]


def test_text_stays_text_json_is_decoded_and_null_unsets() -> None:
    environ = {
        "APP_NAME": "42",
        "APP_INNER__LEVEL": "3",
        "APP_INNER__TAGS": '["a", "b"]',
        "APP_INNER__NOTE": "null",
        "APP_MAYBE": '{"level": 1}',
        "OTHER": "ignored",
    }
    overrides = read_overrides(Outer, environ, prefix="APP_")
    assert overrides.values == {
        "name": "42",  # validation reads it as the field's type; here it stays text
        "inner": {"level": "3", "tags": ["a", "b"], "note": None},
        "maybe": {"level": 1},
    }


def test_an_error_is_blamed_on_the_variable_that_set_the_value() -> None:
    overrides = read_overrides(
        Outer, {"APP_MAYBE": '{"tags": ["x"]}', "APP_INNER__LEVEL": "x"}, prefix="APP_"
    )
    assert overrides.blame(("inner", "level")) == "set by APP_INNER__LEVEL"
    assert overrides.blame(("maybe", "tags", 0)) == "set by APP_MAYBE"
    assert overrides.blame(("maybe", "level")) is None  # not in the variable: the file's, or a default
    assert overrides.blame(("inner",)) == "with APP_INNER__LEVEL from the environment"
    assert overrides.blame(("name",)) is None
    assert overrides.blame(()) is None


def test_an_excluded_field_cannot_be_set_even_without_a_path() -> None:
    with pytest.raises(ConfigError, match=r"^APP_HIDDEN: hidden cannot be set from the environment"):
        read_overrides(Outer, {"APP_HIDDEN": "{}"}, prefix="APP_", exclude={"hidden"})


def test_a_path_through_an_optional_section_is_followed() -> None:
    overrides = read_overrides(Outer, {"APP_MAYBE__NOTE": "hi"}, prefix="APP_")
    assert overrides.values == {"maybe": {"note": "hi"}}
