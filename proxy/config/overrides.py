"""``MANIFOLD_*`` environment variables over the config file, derived from the config model itself.

Every field of the model may be set from the environment, at any depth, except the sections the
caller leaves out (the servers): ``MANIFOLD_`` and the field's path in capitals, joined by ``__``::

    MANIFOLD_LISTEN__PORT=9000
    MANIFOLD_POLICY__PINS__MODE=block
    MANIFOLD_AUTH__ANONYMOUS__ENABLED=false

The model is the list: a field added to it is overridable at once, and nothing here names one.

Values. A list, a mapping or a whole section is JSON (``MANIFOLD_LISTEN__ALLOWED_HOSTS='["gw"]'``,
``MANIFOLD_RATE_LIMITS__HTTP='{"rate": "50/second"}'``). Anything else is the text itself, which
validation reads as the field's type (``9000``, ``true``, ``debug``); ``null`` unsets a field that
may be unset (``MANIFOLD_METRICS__PORT=null``). A variable for a field wins over one for its
whole section. Names are matched without regard to case.

Mistakes are errors that name the variable: a value that is not JSON where JSON is needed, a
field that does not exist (with the closest one suggested), a path through a plain value, two
spellings of one variable. A name without ``__`` that is no field is left alone, though: it may be
the operator's own variable, read by a ``${MANIFOLD_SESSION_SECRET}`` in the file.

The variables are read into nested data by pydantic-settings (``EnvSettingsSource`` with
``env_nested_delimiter="__"``, case-insensitive, JSON for complex fields); this module checks
each name against the model first, so that a variable that names nothing is an error, and says
which variable set what. The environment is passed in, a mapping of plain data comes out.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from proxy.core.errors import ConfigError

__all__ = ["Overrides", "Setting", "overridable", "read_overrides"]

Loc: TypeAlias = tuple[str | int, ...]
FieldPath: TypeAlias = tuple[str, ...]

_SEPARATOR: Final = "__"
_STRUCTURED: Final = (tuple, list, set, frozenset, dict, Mapping, Collection)


@dataclass(frozen=True, slots=True)
class Setting:
    """One field the environment may set: its variable, its path, and whether it is a section."""

    variable: str
    path: FieldPath
    section: bool


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the environment sets, ready to merge over the file's data, and which variable set what."""

    values: dict[str, Any]
    applied: tuple[tuple[FieldPath, str], ...] = ()  # (path, variable), in the order applied

    def blame(self, loc: Loc) -> str | None:
        """Words for an error at ``loc`` that the environment may have caused, or None.

        ``"set by MANIFOLD_X"`` when a variable set the value at ``loc``; ``"with MANIFOLD_X from
        the environment"`` when ``loc`` is a section that variables set parts of.
        """
        if not loc:
            return None  # the whole config: no variable is more to blame than the file
        for path, variable in reversed(self.applied):  # the most specific variable was applied last
            if loc[: len(path)] == path and _holds(self.values, loc):
                return f"set by {variable}"
        inside = sorted({variable for path, variable in self.applied if path[: len(loc)] == loc})
        return f"with {', '.join(inside)} from the environment" if inside else None


def overridable(
    model: type[BaseModel], *, prefix: str = "MANIFOLD_", exclude: Collection[str] = ()
) -> list[Setting]:
    """Every field of ``model`` the environment may set, sections and the fields in them, in order."""
    return list(_settings(model, (), prefix, exclude))


def read_overrides(
    model: type[BaseModel],
    environ: Mapping[str, str],
    *,
    prefix: str = "MANIFOLD_",
    exclude: Collection[str] = (),
) -> Overrides:
    """The values that ``prefix`` variables in ``environ`` set on ``model``'s fields.

    Raises:
        ConfigError: one line per bad variable, each starting with its name.
    """
    problems: list[str] = []
    found: dict[FieldPath, tuple[str, Any]] = {}
    for name in sorted(environ):
        if not name.upper().startswith(prefix.upper()):
            continue
        try:
            resolved = _resolve(model, name, name[len(prefix) :], prefix, exclude)
            if resolved is None:
                continue
            path, annotation = resolved
            if path in found:
                raise ValueError(f"sets {'.'.join(path)} as {found[path][0]} does; keep one of them")
            _check_json(annotation, environ[name])
            found[path] = (name, annotation)
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        raise ConfigError("\n".join(problems))
    accepted = {name: environ[name] for name, _ in found.values()}
    values = _read_environment(model, accepted, prefix) if accepted else {}
    applied = sorted(found.items(), key=lambda item: (len(item[0]), item[0]))  # sections first
    for path, (_, annotation) in applied:
        if environ[found[path][0]] == "null" and type(None) in _members(annotation):
            _place(values, path, None)  # ``null`` unsets a field that may be unset
    return Overrides(values, tuple((path, name) for path, (name, _) in applied))


def _read_environment(model: type[BaseModel], environ: Mapping[str, str], prefix: str) -> dict[str, Any]:
    """pydantic-settings' reading of ``MANIFOLD_*`` variables, from the mapping given.

    Imported here, when a variable is set: pydantic-settings costs a serve that sets none ~1 MiB.
    """
    from pydantic_settings import EnvSettingsSource

    class Environment(EnvSettingsSource):
        def __init__(self) -> None:
            super().__init__(
                model,  # type: ignore[arg-type]  # any model: only its fields are read
                env_prefix=prefix,
                env_nested_delimiter=_SEPARATOR,
                case_sensitive=False,
            )

        def _load_env_vars(self) -> Mapping[str, str | None]:
            return {name.lower(): value for name, value in environ.items()}

        def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
            # pydantic-settings takes any class for JSON (a rate such as "50/second" too); the JSON
            # that must be JSON was checked by name already (``_check_json``), so text stays text.
            try:
                return super().decode_complex_value(field_name, field, value)
            except ValueError:
                return value

    return Environment()()


# --- the model's fields ------------------------------------------------------------------------


def _settings(
    model: type[BaseModel], path: FieldPath, prefix: str, exclude: Collection[str]
) -> Iterator[Setting]:
    for name, field in model.model_fields.items():
        if not path and name in exclude:
            continue
        here = (*path, name)
        section = _section(field.annotation)
        yield Setting(prefix + _SEPARATOR.join(here).upper(), here, section is not None)
        if section is not None:
            yield from _settings(section, here, prefix, exclude)


def _section(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (also when it may be None), or None for anything else."""
    members = [a for a in _members(annotation) if a is not type(None)]
    if len(members) == 1 and isinstance(members[0], type) and issubclass(members[0], BaseModel):
        return members[0]
    return None


def _members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _structured(annotation: Any) -> bool:
    """Whether values of this type are written as JSON: models, lists, mappings."""
    kinds = [typing.get_origin(member) or member for member in _members(annotation)]
    return any(
        isinstance(kind, type)
        and kind not in (str, bytes)  # text is a Collection too, but not JSON here
        and (issubclass(kind, BaseModel) or issubclass(kind, _STRUCTURED))
        for kind in kinds
    )


def _resolve(
    model: type[BaseModel], name: str, rest: str, prefix: str, exclude: Collection[str]
) -> tuple[FieldPath, Any] | None:
    """The path and type a variable names; None when it names nothing and need not (no ``__``)."""
    parts = rest.lower().split(_SEPARATOR)
    section: type[BaseModel] | None = model
    path: FieldPath = ()
    annotation: Any = None
    for part in parts:
        if section is None:
            raise ValueError(f"{'.'.join(path)} is a single setting, not a section with {part!r} in it")
        if not path and part in exclude:
            raise ValueError(f"{part} cannot be set from the environment; use ${{VARIABLE}} in the file")
        fields = {key: field for key, field in section.model_fields.items() if path or key not in exclude}
        if part not in fields:
            if len(parts) == 1:
                return None  # not ours: MANIFOLD_SESSION_SECRET, say, read by ${...} in the file
            known = [prefix + _SEPARATOR.join((*path, key)).upper() for key in fields]
            import difflib  # only to word a config error: not loaded by a good config

            close = difflib.get_close_matches(name.upper(), known, n=1)
            where = f" in {'.'.join(path)}" if path else ""
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"no setting {part!r}{where}{hint}")
        path = (*path, part)
        annotation = fields[part].annotation
        section = _section(annotation)
    return path, annotation


def _check_json(annotation: Any, text: str) -> None:
    """Raises ValueError naming the problem when a complex field's value is not JSON."""
    if _structured(annotation):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            # The value is not repeated: it may hold a key or a secret.
            raise ValueError(
                f"must be JSON{_shape(annotation)}; {exc.msg} at line {exc.lineno}, column {exc.colno}"
            ) from None


def _shape(annotation: Any) -> str:
    """`` (a list)`` or `` (an object)``: what the JSON should look like, when there is one answer."""
    kinds = {typing.get_origin(member) or member for member in _members(annotation)} - {type(None)}
    if all(isinstance(kind, type) and issubclass(kind, (tuple, list, set, frozenset)) for kind in kinds):
        return " (a list)"
    if all(isinstance(kind, type) and issubclass(kind, (BaseModel, dict, Mapping)) for kind in kinds):
        return " (an object)"
    return ""


# --- the values --------------------------------------------------------------------------------


def _place(values: dict[str, Any], path: FieldPath, value: Any) -> None:
    *parents, last = path
    for key in parents:
        inner = values.get(key)
        if not isinstance(inner, dict):
            inner = values[key] = {}  # a section given whole as null or not a mapping: the field wins
        values = inner
    values[last] = value


def _holds(values: Any, loc: Loc) -> bool:
    """Whether ``values`` has something at ``loc`` (keys into mappings, indexes into lists)."""
    for key in loc:
        if isinstance(values, dict):
            if key not in values:
                return False
            values = values[key]
        elif isinstance(values, list) and isinstance(key, int) and 0 <= key < len(values):
            values = values[key]
        else:
            return False
    return True
