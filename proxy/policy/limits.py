"""Limit rules as operators write them in a policy file, and which of them apply to a call.

Pure: no I/O, no clock. A policy file lists its limits under ``limits:``::

    limits:
      - id: per-user-default
        rate: 60/minute          # N/second|minute|hour|day; N may be fractional (0.5/second)
        burst: 10                # optional, default 1: requests admitted at once by a full bucket
        per: [identity]          # required: any of identity, server, tool; [] = one global bucket
        match:                   # optional: every condition given must hold (any element of a list)
          identities: [alice]    # names, as policy rules match them
          issuers: ["https://id.example.com"]   # a JWT's iss (other sources have none)
          roles: [contractor]
          servers: [github]
          tools: ["github.*"]    # fnmatch globs on the canonical name; `*` crosses dots
        methods: [tools/call]    # default [tools/call]

Every limit that applies to a call must let it through (see ``policies/RATELIMITS.md``).
``per: [identity]`` buckets are keyed on the identity's key (source, issuer, subject), never on
its name alone: one issuer's ``alice`` does not spend another's budget, nor a token named like
an API key the key's.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Annotated, Any, Final, Literal, Self, TypeAlias
from urllib.parse import quote

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    field_validator,
)

from proxy.core.errors import ConfigError
from proxy.policy.gcra import LimitCheck

__all__ = [
    "LimitMatch",
    "LimitRule",
    "Rate",
    "applicable",
    "limit_checks",
    "parse_limits",
    "parse_rate",
]

Unit: TypeAlias = Literal["second", "minute", "hour", "day"]
Dimension: TypeAlias = Literal["identity", "server", "tool"]

_PERIODS: dict[str, float] = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
_RATE = re.compile(r"\s*(?P<count>\d+(?:\.\d*)?|\.\d+)\s*/\s*(?P<unit>[a-z]+)\s*")
_ID = re.compile(r"[A-Za-z0-9_.-]+")
_PLAIN = re.compile(r"[A-Za-z0-9_.~-]+")  # what quote() leaves as it is
MIN_INTERVAL = 1e-4  # 10000/second: well above SLACK, so rounding slack stays below 1% of a request


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` requests per ``unit``; a call may go every ``interval`` seconds on average."""

    count: float
    unit: Unit

    @property
    def period(self) -> float:
        return _PERIODS[self.unit]

    @property
    def interval(self) -> float:
        return self.period / self.count

    def __str__(self) -> str:
        count = int(self.count) if self.count.is_integer() else self.count
        return f"{count}/{self.unit}"


def parse_rate(value: Any) -> Rate:
    """A :class:`Rate` from text like ``60/minute`` or ``0.5/second`` (an existing Rate passes).

    Raises:
        ValueError: the text is not ``N/second|minute|hour|day`` with 0 < N <= 10000 per second.
    """
    if isinstance(value, Rate):
        return value
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None or match["unit"] not in _PERIODS:
        raise ValueError(
            f"must look like '60/minute' or '0.5/second' (N/second|minute|hour|day) (got {_show(value)})"
        )
    count = float(match["count"])
    rate = Rate(count, match["unit"])  # type: ignore[arg-type]  # checked against _PERIODS above
    if not count > 0 or not math.isfinite(count):
        raise ValueError(f"the count must be above 0 (got {value!r})")
    if rate.interval < MIN_INTERVAL:
        raise ValueError(f"must be at most 10000/second (got {value!r})")
    return rate


RateField: TypeAlias = Annotated[Rate, PlainValidator(parse_rate), PlainSerializer(str)]
_Names: TypeAlias = tuple[str, ...] | None


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LimitMatch(_Model):
    """The scope of a limit: every condition given must hold; a list holds if any element does."""

    identities: _Names = None
    issuers: _Names = None
    roles: _Names = None
    servers: _Names = None
    tools: _Names = None

    @field_validator("identities", "issuers", "roles", "servers", "tools")
    @classmethod
    def _not_empty(cls, names: _Names) -> _Names:
        if names is not None and not names:
            raise ValueError("must not be empty (leave the field out to match any)")
        return names


# What Manifold forwards to a server, through the pipeline where limits are checked. Lists are
# answered from Manifold's own cache and cost a server nothing, so they are not limited here.
LIMITABLE_METHODS: Final = (
    "tools/call",
    "prompts/get",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
)


class LimitRule(_Model):
    """One limit; :func:`applicable` says when it applies and which bucket a call spends from."""

    id: str
    rate: RateField
    burst: int = Field(default=1, ge=1, le=1_000_000, strict=True)
    per: tuple[Dimension, ...]
    match: LimitMatch = LimitMatch()
    methods: tuple[str, ...] = ("tools/call",)

    @field_validator("id")
    @classmethod
    def _plain_id(cls, rule_id: str) -> str:
        # Bucket keys start with the id and a ':'; keep ids to a set that never contains one.
        if not _ID.fullmatch(rule_id):
            raise ValueError(f"may only contain letters, digits, '_', '.' and '-' (got {rule_id!r})")
        return rule_id

    @field_validator("per")
    @classmethod
    def _distinct(cls, per: tuple[Dimension, ...]) -> tuple[Dimension, ...]:
        if len(set(per)) != len(per):
            raise ValueError(f"lists a dimension twice (got {list(per)})")
        return per

    @field_validator("methods")
    @classmethod
    def _some_methods(cls, methods: tuple[str, ...]) -> tuple[str, ...]:
        unsupported = [m for m in methods if m not in LIMITABLE_METHODS]
        if unsupported:
            raise ValueError(
                f"limits count requests forwarded to servers ({', '.join(LIMITABLE_METHODS)}); "
                f"not {', '.join(map(repr, unsupported))}"
            )
        if not methods:
            raise ValueError("must list at least one method (leave the field out for [tools/call])")
        return methods

    @cached_property
    def matcher(self) -> _Matcher:
        """The scope prepared for the hot path (sets, one regex); built on first use."""
        return _Matcher.of(self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("matcher", None)  # prepared from the old fields: prepare again
        return copied

    def applies(
        self,
        identity: str | None,
        roles: Iterable[str],
        server_id: str | None,
        tool: str | None,
        method: str,
        issuer: str | None = None,
    ) -> bool:
        """Whether this limit covers a call (``None`` fails any condition on that value)."""
        return self.matcher.applies(identity, roles, server_id, tool, method, issuer)

    def bucket_key(
        self, identity: str | Sequence[str] | None, server_id: str | None, tool: str | None
    ) -> str:
        """``<id>`` then ``:<dimension>=<value>`` per ``per`` entry, values percent-encoded.

        ``identity`` is the identity's key (source, issuer, subject), written as its parts
        encoded and joined by ``,`` (``identity=jwt,https%3A%2F%2Fid.example,alice``), or a bare
        name. Encoding leaves no ``:``, ``=`` or ``,`` in a part, and a rule id has none, so
        distinct (rule, values) never share a key. A missing value is the bare dimension.
        """
        values = {"identity": identity, "server": server_id, "tool": tool}
        parts = [self.id]
        for dimension in self.per:
            value = values[dimension]
            if value is None:
                parts.append(dimension)
            elif isinstance(value, str):
                parts.append(f"{dimension}={_encode(value)}")
            else:
                parts.append(f"{dimension}={_encode_key(tuple(value))}")
        return ":".join(parts)

    def limit_check(self, key: str) -> LimitCheck:
        return LimitCheck(key, self.matcher.interval, self.burst, self.id)


@dataclass(frozen=True, slots=True)
class _Matcher:
    # Plain slots, not pydantic private attributes: those cost microseconds per read.
    methods: frozenset[str]
    identities: frozenset[str] | None
    issuers: frozenset[str] | None
    roles: frozenset[str] | None
    servers: frozenset[str] | None
    tools: re.Pattern[str] | None
    interval: float

    @classmethod
    def of(cls, rule: LimitRule) -> _Matcher:
        match = rule.match
        return cls(
            methods=frozenset(rule.methods),
            identities=None if match.identities is None else frozenset(match.identities),
            issuers=None if match.issuers is None else frozenset(match.issuers),
            roles=None if match.roles is None else frozenset(match.roles),
            servers=None if match.servers is None else frozenset(match.servers),
            # fnmatch's `*` already crosses dots; case-sensitive, like tool names.
            tools=None if match.tools is None else re.compile("|".join(map(fnmatch.translate, match.tools))),
            interval=rule.rate.interval,
        )

    def applies(
        self,
        identity: str | None,
        roles: Iterable[str],
        server_id: str | None,
        tool: str | None,
        method: str,
        issuer: str | None = None,
    ) -> bool:
        if method not in self.methods:
            return False
        if self.identities is not None and identity not in self.identities:
            return False
        if self.issuers is not None and issuer not in self.issuers:
            return False
        if self.roles is not None and self.roles.isdisjoint(roles):
            return False
        if self.servers is not None and server_id not in self.servers:
            return False
        return self.tools is None or (tool is not None and self.tools.match(tool) is not None)


def _encode(value: str) -> str:
    # Most names need no escaping; checking that is cheaper than quoting.
    return value if _PLAIN.fullmatch(value) else quote(value, safe="")


@lru_cache(maxsize=4096)
def _encode_key(parts: tuple[str, ...]) -> str:
    # An identity key is encoded on every limited call, and an issuer URL always needs quoting:
    # the few identities calling at once make this cache hit almost always.
    return ",".join(map(_encode, parts))


def applicable(
    rules: Sequence[LimitRule],
    identity_name: str | None,
    roles: Iterable[str],
    server_id: str | None,
    tool_name: str | None,
    method: str,
    *,
    identity_key: Sequence[str] | None = None,
) -> list[tuple[LimitRule, str]]:
    """The limits covering a call, each with the key of the bucket the call spends from.

    ``identity_key`` is the caller's :attr:`~proxy.policy.model.Identity.key` (source, issuer,
    subject): ``per: [identity]`` buckets are its, and ``issuers`` matches its issuer. Without
    it (tests, benchmarks) buckets are by ``identity_name``, and ``issuers`` never holds.
    """
    roles = roles if isinstance(roles, frozenset | set) else frozenset(roles)
    issuer = identity_key[1] if identity_key is not None else None
    who = identity_key if identity_key is not None else identity_name
    return [
        (rule, rule.bucket_key(who, server_id, tool_name))
        for rule in rules
        if rule.matcher.applies(identity_name, roles, server_id, tool_name, method, issuer)
    ]


def limit_checks(
    rules: Sequence[LimitRule],
    identity_name: str | None,
    roles: Iterable[str],
    server_id: str | None,
    tool_name: str | None,
    method: str,
    *,
    identity_key: Sequence[str] | None = None,
) -> list[LimitCheck]:
    """What a backend's ``hit`` takes for a call: :func:`applicable` as :class:`LimitCheck` s."""
    found = applicable(rules, identity_name, roles, server_id, tool_name, method, identity_key=identity_key)
    return [rule.limit_check(key) for rule, key in found]


def parse_limits(data: Any, source: str = "<policy>") -> tuple[LimitRule, ...]:
    """The rules of a ``limits:`` list, all checked before any is returned.

    Raises:
        ConfigError: one line per problem, naming the source, the rule (index and id), the field
            and the offending value.
    """
    if not isinstance(data, list | tuple):
        raise ConfigError(f"{source}: limits: must be a list of limits (got {_show(data)})")
    problems: list[str] = []
    rules: list[LimitRule] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(data):
        rule_id = entry.get("id") if isinstance(entry, dict) else None
        where = f"{source}: limits[{index}]" + (f" (id {rule_id!r})" if isinstance(rule_id, str) else "")
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a mapping with id, rate, per (got {_show(entry)})")
            continue
        try:
            rule = LimitRule.model_validate(entry)
        except ValidationError as exc:
            problems += [f"{where}: {_path(e['loc'])}: {_message(e)}" for e in exc.errors(include_url=False)]
            continue
        if rule.id in first_index:
            problems.append(f"{where}: id: duplicate limit id (first used by limits[{first_index[rule.id]}])")
            continue
        first_index[rule.id] = index
        rules.append(rule)
    if problems:
        raise ConfigError("\n".join(problems))
    return tuple(rules)


def _path(loc: tuple[str | int, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def _message(error: Any) -> str:
    kind, message = error["type"], str(error["msg"])
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return f"unknown field (known: {', '.join(_known(error['loc']))})"
    if kind == "value_error":  # our validators: the message already shows the value
        return message.removeprefix("Value error, ")
    message = message.replace("Input should be", "must be")
    return f"{message} (got {_show(error['input'])})"


def _known(loc: tuple[str | int, ...]) -> list[str]:
    model: type[BaseModel] = LimitMatch if loc[:1] == ("match",) else LimitRule
    return list(model.model_fields)


def _show(value: Any) -> str:
    if isinstance(value, str | int | float | bool) or value is None:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    return f"a {type(value).__name__}"
