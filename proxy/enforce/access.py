"""Who sees what: the policy, annotation trust and tool pins, applied to the merged catalogs.

The policy package decides (pure); this module keeps the state that deciding needs at run
time: the engine in force (swapped atomically on reload), each server's trust, the pins file,
and per-identity views of the lists (cached per catalog generation and policy version).
The same decision filters a list and gates a call, so what an identity cannot call it never
sees.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import anyio
import orjson
from cachetools import LRUCache

from proxy.catalog.merge import Catalog, Entry
from proxy.catalog.resources import ResourceIndex
from proxy.catalog.shaping import ToolShape, offered_as_task, problems, shape_definition
from proxy.config.model import ServerConfig
from proxy.config.policy import PolicySettings
from proxy.config.policy_files import load_pins, load_policy, save_pins
from proxy.core.errors import ConfigError
from proxy.core.files import stamps
from proxy.enforce.overlays import Overlays
from proxy.enforce.pin_definitions import Definitions, definitions_path, save_definitions
from proxy.policy import (
    ANONYMOUS,
    CAUTIOUS,
    Decision,
    EffectiveAnnotations,
    Identity,
    Policy,
    PolicyEngine,
    ServerTrust,
    Subject,
    blocked_names,
    compare,
    effective_for_entry,
    pin_new,
    rewrite_definition,
)
from proxy.policy.limits import LimitRule
from proxy.policy.pins import PINNED_FIELDS, Drift, pin_key, summarise_change, tool_hash

if TYPE_CHECKING:  # guardrails are built (and their detectors imported) only for a policy with them
    from proxy.guardrails.guard import Guard
    from proxy.observe.metrics import Metrics

__all__ = [
    "Access",
    "PinChange",
    "PinsStore",
    "ServedTools",
    "own_secrets",
    "quarantine_key",
    "renames",
    "tool_shapes",
]

logger = logging.getLogger("proxy.enforce.access")

_ALLOW_ALL: Final = Decision("allow", (), ("no policy is configured; everything is allowed",))
_WATCH_INTERVAL: Final = 2.0


@runtime_checkable
class DefinitionsStore(Protocol):
    """Where the approved definitions go (:mod:`proxy.enforce.pin_definitions`)."""

    def save_definitions(self, stored: Mapping[str, str]) -> None: ...


class PinsStore(Protocol):
    """Where new pins go: saved now, or soon (:class:`~proxy.enforce.pins_writer.PinsWriter`)."""

    def save(self, pins: Mapping[str, str]) -> None: ...

    def unwritten(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class _SaveNow:
    path: str

    def save(self, pins: Mapping[str, str]) -> None:
        save_pins(self.path, pins)

    def unwritten(self) -> Mapping[str, str]:
        return {}

    def save_definitions(self, stored: Mapping[str, str]) -> None:
        save_definitions(definitions_path(self.path), stored)


@dataclass(frozen=True, slots=True)
class PinChange:
    """A drifted tool under ``pins.mode: confirm``: asked about before an identity's first call."""

    drift: Drift
    summary: str  # what changed (:func:`proxy.policy.pins.summarise_change`)


@dataclass(frozen=True)
class ServedTools:
    """One tools catalog as clients may be shown it: effective annotations, blocked tools out."""

    catalog: Catalog
    definitions: Mapping[str, Mapping[str, Any]]  # namespaced name -> definition clients see
    effective: Mapping[str, EffectiveAnnotations]
    blocked: Mapping[str, str]  # namespaced name -> why (a pin drift, an override that does not fit)

    def subject(self, name: str) -> Subject:
        entry = self.catalog.by_name[name]
        return Subject.tool(entry, self.effective.get(name, CAUTIOUS))


def tool_shapes(servers: Mapping[str, ServerConfig]) -> dict[tuple[str, str], ToolShape]:
    """Every configured tool override, by (server id, the server's own tool name)."""
    return {
        (sid, tool): ToolShape(
            name=override.name,
            title=override.title,
            description=override.description,
            fixed={a: o.fixed for a, o in override.arguments.items() if "fixed" in o.model_fields_set},
            defaults={a: o.default for a, o in override.arguments.items() if "default" in o.model_fields_set},
            hidden=frozenset(a for a, o in override.arguments.items() if o.hidden),
        )
        for sid, server in servers.items()
        for tool, override in server.tools.items()
    }


def renames(servers: Mapping[str, ServerConfig]) -> dict[tuple[str, str], str]:
    """The names overrides give tools instead of their servers' own: (server id, tool) -> name."""
    return {(sid, tool): o.name for sid, s in servers.items() for tool, o in s.tools.items() if o.name}


def quarantine_key(entry: Entry) -> str:
    """Where the pins file keeps the definition an operator accepted out of quarantine."""
    return f"quarantine:{pin_key(entry.server_id, entry.original_name)}"


def definition_hash(definition: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of a prompt's or resource's definition (canonical JSON)."""
    return "sha256:" + hashlib.sha256(orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _why(reason: str, detectors: Sequence[str]) -> str:
    return f"{reason} (found: {', '.join(detectors)})" if detectors else reason


_SECRET_NAME: Final = re.compile(r"(?i)token|secret|passw|api_?key|credential|auth")


def own_secrets(servers: Mapping[str, ServerConfig]) -> tuple[str, ...]:
    """The secrets the config gives Manifold for its servers (headers, environment): what the
    ``manifold_secret`` detector finds, should one leak into a message."""
    found = {value.get_secret_value() for server in servers.values() for value in server.headers.values()}
    found.update(
        value.get_secret_value()
        for server in servers.values()
        for name, value in server.env.items()
        if _SECRET_NAME.search(name)  # PATH or NODE_ENV are not secrets; API_TOKEN is
    )
    return tuple(sorted(value for value in found if len(value) >= 8))


class Access:
    def __init__(
        self,
        settings: PolicySettings,
        servers: Mapping[str, ServerConfig],
        *,
        on_drift: Callable[[str], None] | None = None,
        pins_store: PinsStore | None = None,
    ) -> None:
        """``pins_store``: how new pins are saved. The gateway passes a
        :class:`~proxy.enforce.pins_writer.PinsWriter`, which writes off the event loop; the default
        writes at once, on the caller's thread (for the CLI and tests)."""
        self.settings = settings
        self._on_drift = on_drift
        self._pins_store = pins_store or _SaveNow(settings.pins.path)
        self._trust = {
            sid: ServerTrust(trusted=s.trusted, annotations=s.annotations) for sid, s in servers.items()
        }
        self._shapes = tool_shapes(servers)
        self._holding = {sid: s for sid, s in servers.items() if s.holds_any}  # listed as task tools
        self.engine: PolicyEngine | None = None
        self.limits: tuple[LimitRule, ...] = ()
        self._limits_by_id: dict[str, LimitRule] = {}
        self.version = 0  # moves on every successful reload; views and cursors follow it
        self._files = stamps(settings.files)
        self._pins: dict[str, str] = {}
        if settings.pins.mode != "off":
            self._pins = self._read_pins()
        self._reported: set[tuple[str, str]] = set()
        # pins.mode confirm: the definition last seen matching its pin (to say what changed),
        # and the tools drifted now, by pin key.
        self._approved: dict[str, dict[str, Any]] = {}
        self._changes: dict[str, PinChange] = {}
        self._confirming = False  # the policy in force has a confirm rule
        # ... and kept beside the pins file, so that a restart does not forget what was approved.
        self._definitions = Definitions(definitions_path(settings.pins.path))
        store = self._pins_store
        self._definitions_store = (
            store if isinstance(store, DefinitionsStore) else _SaveNow(settings.pins.path)
        )
        if settings.pins.mode == "confirm":
            self._definitions.load()
        self._views: LRUCache[tuple[Any, ...], tuple[Mapping[str, Any], ...]] = LRUCache(maxsize=512)
        self.guard: Guard | None = None  # the policy's guardrails, when it has any
        # Definitions judged by the guardrails (server, tool, definition hash) -> (effect, why),
        # and the tools quarantined now: namespaced name -> (acceptance key, definition hash).
        self._judged: LRUCache[tuple[str, str, str], tuple[str, str]] = LRUCache(maxsize=16384)
        self.quarantined: dict[str, tuple[str, str]] = {}
        # Prompts and resources whose definitions are quarantined: (kind, canonical name or URI)
        # -> the refusal's reason. Hidden from lists and refused as missing, as denied ones are.
        self._held: dict[tuple[str, str], str] = {}
        self.held_keys: dict[str, tuple[str, str]] = {}  # name or URI -> (acceptance key, hash)
        self._guard_outputs: tuple[Metrics | None, Callable[[dict[str, Any]], None] | None] = (None, None)
        self._own_secrets = own_secrets(servers)
        self._pending_guard: Guard | None = None  # read with the policy, not installed yet
        self.overlays = Overlays()  # tools operators switched off (proxy.admin), on top of the policy

    # ---- the policy in force ----------------------------------------------------------

    def load(self) -> None:
        """Read the policy files.

        Raises:
            ConfigError: a file is missing or invalid (the policy in force is not changed).
        """
        # Everything is read before anything is installed: a bad pins file must not leave a new
        # policy deciding while the views (same version) still show the old one.
        self._install(*self._read())

    def _read(self) -> tuple[Policy | None, dict[str, str]]:
        """The policy and pins on disk (nothing installed).

        Raises:
            ConfigError: a file is missing or invalid.
        """
        policy = load_policy(list(self.settings.files)) if self.settings.files else None
        pins = self._read_pins() if self.settings.pins.mode != "off" else self._pins
        # Built now, so that a rule naming an unconfigured hook is refused with the rest of the
        # files; installed with the policy (a reload that changes nothing drops it unused).
        self._pending_guard = self._build_guard(policy)
        return policy, pins

    def _build_guard(self, policy: Policy | None) -> Guard | None:
        """The guard for ``policy``'s guardrail rules, or None without any.

        Raises:
            ConfigError: a rule names a hook the config lacks, or a hook's mTLS files are unusable.
        """
        if policy is None or policy.guardrails is None or not policy.guardrails.rules:
            return None
        from proxy.guardrails.wiring import build_guard

        guard = build_guard(policy.guardrails, self.settings.guardrails, own_secrets=self._own_secrets)
        guard.observe(*self._guard_outputs)
        return guard

    def _install(self, policy: Policy | None, pins: dict[str, str]) -> None:
        guard, self._pending_guard = self._pending_guard, None
        if policy is not None:
            if self.guard is not None:
                self.guard.close()
            self.guard = guard
            self._judged.clear()
            self.engine = PolicyEngine(policy)
            self._confirming = any(rule.effect == "confirm" for rule in policy.rules)
            self.limits = policy.limits
            self._limits_by_id = {rule.id: rule for rule in policy.limits}
        self._pins = pins
        self.version += 1
        self._views.clear()

    def observe_guardrails(
        self, metrics: Metrics | None, audit: Callable[[dict[str, Any]], None] | None
    ) -> None:
        """Where the guardrails count and audit (now and after every reload)."""
        self._guard_outputs = (metrics, audit)
        if self.guard is not None:
            self.guard.observe(metrics, audit)

    def reload(self) -> bool:
        """Re-read the files; a bad file is logged and the old policy stays. True if what they
        say changed: the same rules and pins read again change nothing (no new version, so no
        view, cursor or client hears of it), and with neither policy files nor pins there is
        nothing to read."""
        self._files = stamps(self.settings.files)
        if not self.settings.files and self.settings.pins.mode == "off":
            return False
        try:
            policy, pins = self._read()
        except ConfigError as exc:
            logger.error("policy reload refused, the previous policy stays in force:\n%s", exc)
            return False
        in_force = self.engine.policy if self.engine is not None else None
        if policy == in_force and pins == self._pins:
            unused, self._pending_guard = self._pending_guard, None
            if unused is not None:
                unused.close()  # built with the read, never installed: its hooks' clients go too
            logger.debug("policy and pins read again: unchanged (version %d)", self.version)
            return False
        read = [f"policy files {', '.join(self.settings.files)}"] if policy != in_force else []
        if pins != self._pins:
            read.append(f"pins {self.settings.pins.path}")
        self._install(policy, pins)
        logger.info("policy reloaded: %s changed (version %d)", " and ".join(read), self.version)
        return True

    def servers_changed(self, servers: Mapping[str, ServerConfig]) -> None:
        """The servers changed (a config reload): their trust and tool overrides are these now."""
        self._trust = {
            sid: ServerTrust(trusted=s.trusted, annotations=s.annotations) for sid, s in servers.items()
        }
        self._shapes = tool_shapes(servers)
        self._holding = {sid: s for sid, s in servers.items() if s.holds_any}
        self._own_secrets = own_secrets(servers)  # read by the guardrails at the next policy load
        self.version += 1
        self._views.clear()

    async def watch(self, on_change: Any) -> None:
        """Reload when a policy file changes (polled: inotify is not portable)."""
        while True:
            await anyio.sleep(_WATCH_INTERVAL)
            if stamps(self.settings.files) != self._files and self.reload():
                on_change()

    def limit(self, rule_id: str) -> LimitRule | None:
        return self._limits_by_id.get(rule_id)

    def decide(self, identity: Identity, subject: Subject) -> Decision:
        if self._held and (held := self._held.get((subject.kind, subject.name))) is not None:
            return Decision("deny", ("quarantine",), (held,))
        return _ALLOW_ALL if self.engine is None else self.engine.decide(identity, subject)

    def held(self, kind: str, name: str | None = None) -> bool:
        """Whether the prompt or resource (or template) ``name`` is quarantined now; without a
        name, whether anything is."""
        return bool(self._held) if name is None else (kind, name) in self._held

    def judge_definitions(self, kind: str, items: Sequence[tuple[str, str, Mapping[str, Any]]]) -> None:
        """Quarantine the prompts or resources (``kind``) among ``items`` — (server id, canonical
        name or URI, definition) — that a guardrail rule holds and no operator accepted; release
        the rest. Each definition is judged once (by its hash)."""
        if self.guard is None:
            changed = any(key[0] == kind for key in self._held)
            self._held = {key: why for key, why in self._held.items() if key[0] != kind}
            self.held_keys = {
                n: k for n, k in self.held_keys.items() if not k[0].startswith(f"quarantine:{kind}:")
            }
        else:
            from proxy.policy.guardrail_engine import GuardSubject

            accepted = load_pins(self.settings.pins.path) if self.settings.pins.path else {}
            held = {key: why for key, why in self._held.items() if key[0] != kind}
            self.held_keys = {
                n: k for n, k in self.held_keys.items() if not k[0].startswith(f"quarantine:{kind}:")
            }
            for server_id, name, definition in items:
                digest = definition_hash(definition)
                key = (server_id, f"{kind}:{name}", digest)
                judged = self._judged.get(key)
                if judged is None:
                    subject = GuardSubject("definitions", server_id, kind, name)  # type: ignore[arg-type]
                    found = self.guard.inspect_now(ANONYMOUS, subject, definition)
                    judged = (
                        ("allow", "")
                        if found is None
                        else (found.effect, _why(found.reason, found.detectors))
                    )
                    self._judged[key] = judged
                accept_key = f"quarantine:{kind}:{server_id}/{name}"
                if judged[0] == "quarantine" and accepted.get(accept_key) != digest:
                    self.held_keys[name] = (accept_key, digest)
                    held[(kind, name)] = f"Manifold is withholding this {kind}: its definition is {judged[1]}"
                    if (name, digest) not in self._reported:
                        self._reported.add((name, digest))
                        logger.warning("%s %r quarantined: %s", kind, name, judged[1])
            changed = held != self._held
            self._held = held
        if changed:
            self.version += 1  # the views (and cursors) of every identity follow
            self._views.clear()

    def allows(self, identity: Identity, subject: Subject) -> bool:
        """Whether lists show ``subject`` to ``identity`` (and so whether it exists for them)."""
        if self.engine is None or self.settings.dry_run:
            return True
        return self.decide(identity, subject).visible

    # ---- tools: trust and pins ------------------------------------------------------

    def serve_tools(self, catalog: Catalog) -> ServedTools:
        """Apply trust (effective annotations) and pins to a freshly merged tools catalog."""
        effective = {e.name: effective_for_entry(e, self._trust.get(e.server_id)) for e in catalog.entries}
        definitions = {e.name: rewrite_definition(e.definition, effective[e.name]) for e in catalog.entries}
        blocked: dict[str, str] = {}
        for entry in catalog.entries:
            holding = self._holding.get(entry.server_id)
            if holding is not None and holding.holds(entry.original_name):
                definitions[entry.name] = offered_as_task(definitions[entry.name])
            shape = self._shapes.get((entry.server_id, entry.original_name))
            if shape is None:
                continue
            # Checked against what the server sent, every time it lists: a tool whose override
            # does not fit is withheld, never served without its fixed arguments.
            unfit = problems(entry.server_id, entry.original_name, entry.definition, shape)
            if unfit:
                blocked[entry.name] = f"Manifold is withholding this tool: {'; '.join(unfit)}."
                if (entry.name, unfit[0]) not in self._reported:
                    self._reported.add((entry.name, unfit[0]))
                    logger.error("tool override does not fit, the tool is withheld: %s", "; ".join(unfit))
                continue
            definitions[entry.name] = shape_definition(definitions[entry.name], shape)
        self._unmatched_overrides(catalog)
        if self.guard is not None:
            blocked.update(self._quarantine(catalog.entries, blocked))
        mode = self.settings.pins.mode
        if mode != "off":
            # The file is the source of truth: `manifold pins accept` may have changed it.
            self._pins = self._read_pins()
            drifts = compare(self._pins, catalog.entries)
            for drift in drifts:
                if (drift.key, drift.new_hash) not in self._reported:
                    self._reported.add((drift.key, drift.new_hash))
                    action = {
                        "block": "hidden until accepted (manifold pins accept)",
                        "confirm": "served; each identity is asked before its first call of it",
                    }.get(mode, "served")
                    logger.warning("pin drift: %s; %s", drift.describe(), action)
                    if self._on_drift is not None:
                        self._on_drift(drift.server)
            names = blocked_names(drifts, mode)
            blocked.update(
                {
                    d.name: f"Manifold is withholding this tool: {d.describe()}."
                    for d in drifts
                    if d.name in names
                }
            )
            if mode == "confirm":
                self._note_changes(catalog, drifts)
            pins = pin_new(self._pins, catalog.entries)
            if pins != self._pins:
                self._pins = pins
                self._pins_store.save(pins)
        return ServedTools(catalog, definitions, effective, blocked)

    def _quarantine(self, entries: Sequence[Entry], blocked: Mapping[str, str]) -> dict[str, str]:
        """The tools whose definitions a guardrail rule quarantines and no operator accepted:
        namespaced name -> why. Judged on what the server sent, once per definition."""
        from proxy.policy.guardrail_engine import GuardSubject

        assert self.guard is not None
        accepted = load_pins(self.settings.pins.path) if self.settings.pins.path else {}
        held: dict[str, str] = {}
        self.quarantined = {}
        for entry in entries:
            if entry.name in blocked:
                continue
            subject = GuardSubject("definitions", entry.server_id, "tool", entry.canonical)
            digest = tool_hash(entry)
            key = (entry.server_id, entry.original_name, digest)
            judged = self._judged.get(key)
            if judged is None:
                found = self.guard.inspect_now(ANONYMOUS, subject, entry.definition)
                judged = (
                    ("allow", "") if found is None else (found.effect, _why(found.reason, found.detectors))
                )
                self._judged[key] = judged
            verdict, why = judged
            if verdict != "quarantine" or accepted.get(quarantine_key(entry)) == digest:
                continue
            self.quarantined[entry.name] = (quarantine_key(entry), digest)
            held[entry.name] = (
                f"Manifold is withholding this tool: its definition is {why}; an operator "
                "must accept it (manifold pins accept --tool <name>)."
            )
            if (entry.name, digest) not in self._reported:
                self._reported.add((entry.name, digest))
                logger.warning("tool %r quarantined: %s", entry.name, why)
        return held

    def _note_changes(self, catalog: Catalog, drifts: Sequence[Drift]) -> None:
        drifted = {drift.key: drift for drift in drifts}
        kept = False
        for entry in catalog.entries:
            key = pin_key(entry.server_id, entry.original_name)
            drift = drifted.get(key)
            if drift is None:
                self._changes.pop(key, None)
                fields = {f: entry.definition[f] for f in PINNED_FIELDS if f in entry.definition}
                self._approved[key] = fields
                kept = self._definitions.keep(key, tool_hash(entry), fields) or kept
            else:
                approved = self._approved.get(key)
                if approved is None:  # seen only before a restart: kept beside the pins
                    approved = self._definitions.approved(key, drift.old_hash, drift.original_name)
                self._changes[key] = PinChange(drift, summarise_change(approved, entry.definition))
        if kept:
            self._definitions_store.save_definitions(self._definitions.stored)

    @property
    def asks(self) -> bool:
        """Whether a call may need a person's approval for what the policy says: a confirm rule
        in force, or a tool whose pin drifted under ``pins.mode: confirm`` (a guardrail's
        question comes with the call: ``CallContext.guard_question``)."""
        return self._confirming or bool(self._changes)

    def pin_change(self, entry: Entry) -> PinChange | None:
        """The drift of ``entry``'s tool under ``pins.mode: confirm``, if it has drifted."""
        return self._changes.get(pin_key(entry.server_id, entry.original_name))

    def _unmatched_overrides(self, catalog: Catalog) -> None:
        """Warn (once each) of an override for a tool its server, which has listed, does not list."""
        listed = {(e.server_id, e.original_name) for e in catalog.entries}
        servers = {server for server, _ in listed}
        for server, tool in self._shapes:
            if server in servers and (server, tool) not in listed and (server, tool) not in self._reported:
                self._reported.add((server, tool))
                logger.warning(
                    "server %r lists no tool %r; its override in servers.%s.tools applies to nothing",
                    server,
                    tool,
                    server,
                )

    def _read_pins(self) -> dict[str, str]:
        """The pins file, over the pins asked to be saved but not on disk yet: the file wins
        where both have a key (``manifold pins accept`` writes it)."""
        return {**self._pins_store.unwritten(), **load_pins(self.settings.pins.path)}

    def tool_visible(self, served: ServedTools, name: str, identity: Identity) -> bool:
        return (
            name in served.definitions
            and name not in served.blocked
            and self.allows(identity, served.subject(name))
        )

    # ---- per-identity views ----------------------------------------------------------

    def tools_view(self, served: ServedTools, identity: Identity) -> tuple[Mapping[str, Any], ...]:
        key = ("tools", served.catalog.generation, frozenset(served.blocked), self.version, identity)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = tuple(
                served.definitions[e.name]
                for e in served.catalog.entries
                if e.name not in served.blocked and self.allows(identity, served.subject(e.name))
            )
        return view

    def prompts_view(self, catalog: Catalog, identity: Identity) -> Sequence[Mapping[str, Any]]:
        if self.engine is None:
            return catalog.definitions
        key = ("prompts", catalog.generation, self.version, identity)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = tuple(
                e.definition for e in catalog.entries if self.allows(identity, Subject.prompt(e))
            )
        return view

    def resources_view(
        self, index: ResourceIndex, identity: Identity, *, templates: bool
    ) -> Sequence[Mapping[str, Any]]:
        items, owners = (index.templates, index.by_template) if templates else (index.resources, index.by_uri)
        if self.engine is None:
            return items
        key = (
            "templates" if templates else "resources",
            index.generation,
            index.templates_generation,
            self.version,
            identity,
        )
        view = self._views.get(key)
        if view is None:
            # What policy sees of a listed resource is its normal form, as of a URI a client names.
            names = tuple(t["uriTemplate"] for t in items) if templates else index.resource_uris
            view = self._views[key] = tuple(
                item
                for item, name in zip(items, names, strict=True)
                if self.allows(identity, Subject.resource(name, owners[name]))
            )
        return view
