"""What to believe about a tool: its *effective* annotations.

The spec says annotations are hints and that clients "MUST consider tool annotations to be
untrusted unless they come from trusted servers". Manifold is that client, so:

* an **untrusted** server (the default) gets the spec's most cautious values whatever it
  declares: ``readOnlyHint: false, destructiveHint: true, idempotentHint: false,
  openWorldHint: true`` (the spec's documented defaults for absent hints);
* a **trusted** server's declared hints are believed; absent (or non-boolean) ones get the same
  defaults;
* the **operator's** per-tool hints (:class:`~proxy.policy.model.ServerTrust` ``annotations``)
  override both.

Then one normalisation: the spec says ``destructiveHint`` and ``idempotentHint`` are meaningful
only when ``readOnlyHint`` is false, so a read-only tool is treated as not destructive and
idempotent. Otherwise an operator who marks a tool ``readOnlyHint: true`` on an untrusted server
would still see it caught by every "no destructive tools" rule through the default
``destructiveHint: true``.

Policy rules match these effective values, and clients are shown them too
(:func:`rewrite_definition`): what a client believes and what the policy enforced agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from proxy.catalog.merge import Entry
from proxy.policy.model import HINT_NAMES, ServerTrust

__all__ = [
    "CAUTIOUS",
    "AnnotationSource",
    "EffectiveAnnotations",
    "effective_annotations",
    "effective_for_entry",
    "rewrite_definition",
]

AnnotationSource: TypeAlias = Literal["server", "operator", "default"]

# The spec's defaults for absent hints (ToolAnnotations in schema.json, 2025-11-25).
_SPEC_DEFAULTS: Final[Mapping[str, bool]] = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}


@dataclass(frozen=True, slots=True)
class EffectiveAnnotations:
    """The annotations policy acts on, and where they came from (for the audit record).

    ``source`` is ``"operator"`` when any operator override applied, else ``"server"`` when a
    trusted server declared at least one hint, else ``"default"``.
    """

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    source: AnnotationSource

    def hints(self) -> dict[str, bool]:
        """The values under the spec's names (``readOnlyHint`` …)."""
        return {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }


CAUTIOUS: Final = EffectiveAnnotations(
    read_only=False, destructive=True, idempotent=False, open_world=True, source="default"
)
"""What an untrusted tool is assumed to be: the spec's defaults, the most cautious reading."""


def _hints(values: Mapping[str, Any] | None) -> dict[str, bool]:
    """The boolean hints in ``values``; anything else (a title, a string "true") is ignored."""
    if not isinstance(values, Mapping):
        return {}
    return {name: value for name in HINT_NAMES if isinstance(value := values.get(name), bool)}


def effective_annotations(
    declared: Mapping[str, Any] | None, *, trusted: bool, override: Mapping[str, Any] | None
) -> EffectiveAnnotations:
    """The annotations to act on for one tool.

    Args:
        declared: the tool definition's ``annotations`` as the server sent it (may be absent
            or malformed: only boolean hints count).
        trusted: whether the server's hints are believed.
        override: the operator's hints for this tool, applied last.
    """
    believed = _hints(declared) if trusted else {}
    forced = _hints(override)
    values = {**_SPEC_DEFAULTS, **believed, **forced}
    source: AnnotationSource = "operator" if forced else "server" if believed else "default"
    read_only = values["readOnlyHint"]
    return EffectiveAnnotations(
        read_only=read_only,
        # Meaningful only when not read-only (spec); a read-only tool changes nothing.
        destructive=values["destructiveHint"] and not read_only,
        idempotent=values["idempotentHint"] or read_only,
        open_world=values["openWorldHint"],
        source=source,
    )


def effective_for_entry(entry: Entry, trust: ServerTrust | None) -> EffectiveAnnotations:
    """:func:`effective_annotations` for a catalog entry, given its server's trust settings.

    ``trust`` None means the server has no trust section: untrusted, no overrides.
    """
    declared = entry.definition.get("annotations")
    if trust is None:
        return effective_annotations(declared, trusted=False, override=None)
    return effective_annotations(
        declared, trusted=trust.trusted, override=trust.override_for(entry.original_name)
    )


def rewrite_definition(definition: Mapping[str, Any], effective: EffectiveAnnotations) -> dict[str, Any]:
    """The tool definition clients see: the four hints replaced by the effective values.

    Other annotation keys (``title`` …) and the rest of the definition are kept. The result is
    a new, shallow dict; ``definition`` is not changed.
    """
    declared = definition.get("annotations")
    annotations = dict(declared) if isinstance(declared, Mapping) else {}
    annotations.update(effective.hints())
    rewritten = dict(definition)
    rewritten["annotations"] = annotations
    return rewritten
