"""Policy documents in, one :class:`~proxy.policy.model.Policy` out, or a ConfigError that says where.

A policy is one or more YAML (or ``.json``) documents loaded together (the language is in
``policies/README.md``). Loading several is how operators layer policy: a shared baseline plus
a file per team, say. Across the files:

* rule ids must be unique (an id names one rule in every decision and audit record);
* ``default`` may be given in any number of them, but every given default must agree; a file
  that leaves it out takes the others'; none at all means ``deny``.

Every problem is reported, one line each, naming the file, the rule (index and id), the field
and the value: ``team.yaml: rules[2] (id 'gh-readers'): match.tools[0]: unclosed '[' …``.

Pure: text or parsed data and a source name in. Reading the files is
:func:`proxy.config.policy_files.load_policy`'s job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

# These parsers reject duplicate keys, which plain YAML would silently resolve
# to the last one: exactly the kind of slip a security policy must not absorb.
from proxy.core.documents import parse_document, show_value
from proxy.core.errors import ConfigError
from proxy.policy.limits import LimitRule, parse_limits
from proxy.policy.model import AnnotationMatch, ConfirmOptions, Default, Match, Policy, PolicyDocument, Rule

__all__ = ["combine", "document_from_mapping", "parse_policy_text"]

Loc = tuple[str | int, ...]


def parse_policy_text(text: str, source: str) -> PolicyDocument:
    """Parse one document (JSON when ``source`` ends in ``.json``, else YAML).

    Raises:
        ConfigError: not YAML/JSON, or not a valid policy document.
    """
    data = parse_document(text, source)
    if not isinstance(data, Mapping):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{source}: the top level must be a mapping with 'version' and 'rules' (got {got})")
    return document_from_mapping(data, source=source)


def document_from_mapping(data: Mapping[str, Any], *, source: str = "<policy>") -> PolicyDocument:
    """Validate already-parsed data as one policy document.

    Raises:
        ConfigError: the data is not a valid document; every problem on its own line.
    """
    try:
        document = PolicyDocument.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("\n".join(_describe(error, source, data) for error in exc.errors())) from None
    problems = [
        _line(source, ("rules", index), data, "id", f"duplicate rule id {rule.id!r} (also rules[{first}])")
        for index, rule, first in _duplicates(document.rules)
    ]
    if problems:
        raise ConfigError("\n".join(problems))
    if document.limits:
        document = document.model_copy(update={"limits": parse_limits(list(document.limits), source)})
    if document.guardrails is not None:
        from proxy.policy.guardrail_loader import parse_guardrails  # only for a policy that has them

        document = document.model_copy(update={"guardrails": parse_guardrails(document.guardrails, source)})
    return document


def combine(documents: Iterable[tuple[str, PolicyDocument]]) -> Policy:
    """One policy from ``(source, document)`` pairs, checked across documents.

    Raises:
        ConfigError: a rule id appears in two documents, or two documents set different defaults.
    """
    problems: list[str] = []
    owners: dict[str, str] = {}  # rule id -> the source that has it first
    default: tuple[str, Default] | None = None
    rules: list[Rule] = []
    limits: list[LimitRule] = []
    limit_owners: dict[str, str] = {}
    guarded: list[tuple[str, Any]] = []
    for source, document in documents:
        if document.guardrails is not None:
            guarded.append((source, document.guardrails))
        for index, limit in enumerate(document.limits):
            if limit.id in limit_owners:
                problems.append(
                    f"{source}: limits[{index}] (id {limit.id!r}): id: already used by a limit in "
                    f"{limit_owners[limit.id]}"
                )
            else:
                limit_owners[limit.id] = source
                limits.append(limit)
        if document.default is not None:
            if default is None:
                default = (source, document.default)
            elif document.default != default[1]:
                problems.append(
                    f"{source}: default: {document.default!r} contradicts default {default[1]!r} "
                    f"set in {default[0]} (files loaded together must agree; leave it out of one)"
                )
        for index, rule in enumerate(document.rules):
            if rule.id in owners:
                problems.append(
                    f"{source}: rules[{index}] (id {rule.id!r}): id: already used by a rule in "
                    f"{owners[rule.id]}"
                )
            else:
                owners[rule.id] = source
                rules.append(rule)
    if problems:
        raise ConfigError("\n".join(problems))
    guardrails = None
    if guarded:
        from proxy.policy.guardrail_loader import BUILT_IN_DETECTORS, combine_guardrails

        guardrails = combine_guardrails(guarded, known_detectors=BUILT_IN_DETECTORS, policy_rule_ids=owners)
    return Policy(
        default=default[1] if default is not None else "deny",
        rules=tuple(rules),
        limits=tuple(limits),
        guardrails=guardrails,
    )


def _duplicates(rules: Sequence[Rule]) -> list[tuple[int, Rule, int]]:
    first: dict[str, int] = {}
    found = []
    for index, rule in enumerate(rules):
        if rule.id in first:
            found.append((index, rule, first[rule.id]))
        else:
            first[rule.id] = index
    return found


# --- wording -------------------------------------------------------------------------------------

# Pydantic's wording, in the file's terms (YAML has lists and mappings, not tuples and dicts).
_PLAIN: dict[str, str] = {
    "model_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "tuple_type": "must be a list",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "string_pattern_mismatch": "must be a letter or digit, then letters, digits, '_', '.', ':' or '-'",
}

# Which model describes the mapping at a location, for "did you mean …?".
_SECTIONS: dict[str, type[BaseModel]] = {
    "match": Match,
    "unless": Match,
    "annotations": AnnotationMatch,
    "confirm": ConfirmOptions,
}


def _describe(error: ErrorDetails, source: str, data: Mapping[str, Any]) -> str:
    loc: Loc = tuple(error["loc"])
    kind = error["type"]
    if kind == "missing":
        message = "required field is missing"
    elif kind == "extra_forbidden":
        known = _known_keys(loc[:-1])
        import difflib  # only to word a config error: not loaded by a good config

        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        message = "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
        if known:
            message += f"; expected one of: {', '.join(known)}"
    elif kind == "value_error":  # raised by the model's own checks, which word it fully
        message = error["msg"].removeprefix("Value error, ")
    else:
        message = _PLAIN.get(kind) or error["msg"].replace("Input should be", "must be")
        message += f" (got {show_value(error['input'])}"
        if kind == "tuple_type" and isinstance(error["input"], str):
            message += f"; write [{error['input']}] for a list of one"
        message += ")"
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
        rest = _path(loc[2:])
        return _line(source, loc[:2], data, rest, message)
    return f"{source}: {_path(loc)}: {message}" if loc else f"{source}: {message}"


def _known_keys(parent: Loc) -> list[str]:
    if not parent:
        return list(PolicyDocument.model_fields)
    if len(parent) == 2 and parent[0] == "rules":
        return list(Rule.model_fields)
    model = _SECTIONS.get(str(parent[-1]))
    return list(model.model_fields) if model is not None else []


def _line(source: str, rule_loc: Loc, data: Mapping[str, Any], field: str, message: str) -> str:
    """``source: rules[i] (id 'x'): field: message``; the id only when the file has a usable one."""
    index = rule_loc[1]
    rules = data.get("rules")
    rule = rules[index] if isinstance(rules, list) and isinstance(index, int) and index < len(rules) else None
    rule_id = rule.get("id") if isinstance(rule, Mapping) else None
    where = f"rules[{index}]" + (f" (id {rule_id!r})" if isinstance(rule_id, str) and rule_id else "")
    return f"{source}: {where}: {field}: {message}" if field else f"{source}: {where}: {message}"


def _path(loc: Loc) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
