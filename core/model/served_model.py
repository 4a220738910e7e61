"""The served model: base weights plus, per knowledge version in use, each registered method's state.

A request pins the version that is current when it starts and every one of its decoding steps runs
with that version's state, so a swap never mixes two versions inside one answer. A new version is
added between two decoding steps (both hold the same lock), and an old one is dropped once no request
pins it. What a method keeps per version, and how it switches, is its serving side's business
(methods/<name>/serving.py).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
from torch import nn

from core import registry
from core.model.loader import LoadedModel
from core.routing import about, by_name, evidence, named, route
from core.routing.table import by_method, extended
from core.served import OFF, ROUTED, Choice, LoadDelta, ServedMethod
from core.settings import Settings
from core.state import Knowledge, resolve
from core.subjects import words
from core.versions import VersionStore

T = TypeVar("T")
Routes = dict[str, Hashable | None]


class UnknownKnowledge(LookupError):
    """A request named documents or subjects the version it runs on does not hold."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(", ".join(sorted(names)))
        self.names = names


class ServingModel:
    def __init__(self, loaded: LoadedModel, settings: Settings) -> None:
        self.tokenizer = loaded.tokenizer
        self.device = loaded.device
        self.name = loaded.name
        self.model: nn.Module = loaded.model  # every method changes it in place (adapter layers, memory hooks)
        if not registry.registered():
            raise RuntimeError("no update method is registered: import the `methods` package first")
        self.methods: dict[str, ServedMethod] = {spec.name: spec.served(self.model, settings)
                                                 for spec in registry.registered()}
        self.per_document = {spec.name: spec.per_document for spec in registry.registered()}
        self.threshold = settings.routing_threshold
        for method in self.methods.values():
            method.add(0, None)
        self._knowledge: dict[int, Knowledge] = {0: Knowledge()}  # per version held: its table and methods' states
        self._lock = threading.Lock()  # decoding steps, installs, pins
        self._loading = threading.Lock()  # loading an older version a request names
        self._kept = 0  # the older version last loaded for a request: held until another is
        self._pins: Counter[int] = Counter()
        self._loaded: set[int] = {0}
        self.current = 0

    def install(self, version: int, state: Knowledge | None) -> float:
        """Make `version` current. Version 0 (the base model) needs no state. Returns the seconds it held the
        lock: the pause it put between two decoding steps."""
        with self._lock:
            clock = time.perf_counter()
            if version not in self._loaded:
                self._add(version, state or Knowledge())
            self.current = version
            self._drop_unused()
            return time.perf_counter() - clock

    def _add(self, version: int, state: Knowledge) -> None:
        for name, method in self.methods.items():
            method.add(version, state.get(name))
        learned = {name: state.states[name] for name in self.methods if state.get(name) is not None}
        self._knowledge[version] = Knowledge(state.table, learned)
        self._loaded.add(version)

    def _drop_unused(self) -> None:
        for version in list(self._loaded):
            if version not in (0, self.current, self._kept) and self._pins[version] == 0:
                for method in self.methods.values():
                    method.drop(version)
                self._loaded.discard(version)
                self._knowledge.pop(version, None)

    def holds(self, version: int) -> bool:
        with self._lock:
            return version in self._knowledge

    def extended(self, chain: list[dict[str, Any]], load_delta: LoadDelta) -> Knowledge | None:
        """What the last of `chain`'s versions holds (manifests oldest first, the first one's parent held), made
        from the held parent's where the table and each manifest's method can tell how (ServedMethod.extend), all
        of the chain at once; None: compose it from the lineage."""
        with self._lock:
            knowledge = self._knowledge.get(chain[0]["parent"] or 0) if chain else None
        if knowledge is None or (table := extended(knowledge.table, chain)) is None:
            return None
        states = dict(knowledge.states)
        for name in dict.fromkeys(manifest["method"] for manifest in chain):
            grown = self.methods[name].extend(states.get(name), [m for m in chain if m["method"] == name],
                                              load_delta) if name in self.methods else None
            if grown is None:
                return None
            states[name] = grown
        return Knowledge(table, states)

    @contextmanager
    def pinned(self, version: int | None = None, load: Callable[[], Knowledge] | None = None) -> Iterator[int]:
        """Hold a version for one request: the current one, or `version`, added with `load()` if not held (an
        older version asked for by name). Loading it composes its lineage and routing index: that runs outside the
        lock every decoding step takes, one load at a time, and the last older version asked for stays held, so
        requests naming it do not build it again each time."""
        version = self._pin(version, load)
        try:
            yield version
        finally:
            with self._lock:
                self._pins[version] -= 1
                self._drop_unused()

    def _pin(self, version: int | None, load: Callable[[], Knowledge] | None) -> int:
        with self._lock:
            version = self.current if version is None else version
            if version in self._loaded:
                self._pins[version] += 1
                return version
        if load is None:
            raise KeyError(f"version {version} is not loaded and there is no way to load it")
        with self._loading:  # a second request for the version waits for the first's load, then finds it held
            with self._lock:
                if version in self._loaded:
                    self._pins[version] += 1
                    return version
            state = load()
            with self._lock:
                if version not in self._loaded:  # made current meanwhile: installed already
                    self._add(version, state)
                self._pins[version] += 1
                self._kept = version
        return version

    def routes(self, version: int, prompt: str, choice: Choice = ROUTED) -> Routes:
        """Each method's route for a prompt, decided once and held for the whole request: the documents the prompt is
        routed to within the choice's namespaces (core/routing/), or only the knowledge it names (UnknownKnowledge if
        `version` holds nothing by one of its names: only documents can be named, so whole-version methods are OFF).
        A choice without weights turns every method OFF."""
        if not choice.weights:
            return {name: OFF for name in self.methods}
        table = self._knowledge[version].table
        if not choice.named:
            return by_method(route(prompt, table.keys(choice.namespaces), self.threshold), table.method_of,
                             self.per_document)
        by_id = {document_id for document_id in choice.documents if table.method_of(document_id) is not None}
        by_subject, found = about(table.keys(choice.namespaces), choice.subjects)
        if missing := choice.names() - found - by_id:
            raise UnknownKnowledge(missing)
        chosen = tuple(t.document_id for t in table.documents if t.document_id in by_id | by_subject)
        return by_method(chosen or None, table.method_of, self.per_document, off=True)

    def decide(self, version: int, prompt_ids: list[int],
               choice: Choice = ROUTED) -> tuple[Routes, list[dict[str, Any]]]:
        """A request's routes, decided on its whole prompt and held for every token of its answer, and what they
        use (`cite`)."""
        prompt = self.tokenizer.decode(prompt_ids, skip_special_tokens=True) if choice.route_on is None \
            else choice.route_on
        routes = self.routes(version, prompt, choice)
        return routes, self.cite(version, prompt, routes)

    def cite(self, version: int, prompt: str, routes: Routes) -> list[dict[str, Any]]:
        """The knowledge a request on `routes` uses: each routed document, with its score and the key terms the prompt
        named, and each whole-version method that learned something in `version` and is on."""
        knowledge = self._knowledge.get(version, Knowledge())
        keys, used = knowledge.table.keys(), []
        for name in self.methods:
            if self.per_document[name] and routes.get(name) != OFF:
                used += [{"method": name, "document_id": d, **evidence(words(prompt), keys.key_of(d))}
                         for d in routes.get(name) or ()]
            elif name in knowledge.states and routes.get(name) != OFF:
                used.append({"method": name, "document_id": None, "whole_version": True})
        return used

    def named_in(self, version: int, prompt: str, choice: Choice, most: int) -> list[dict[str, Any]]:
        """The documents about a known subject whose name the prompt holds (core/routing/route.py: `named`), cited as
        routed ones are, with the terms so named and no score: what a prompt that reaches no document by its key
        reads as context."""
        table = self._knowledge[version].table
        keys = table.keys(choice.namespaces)
        prompt_words = words(prompt)
        return [{"method": table.method_of(d), "document_id": d, **by_name(prompt_words, keys.key_of(d))}
                for d in named(prompt, keys, most)]

    def run(self, version: int, fn: Callable[[nn.Module], T], routes: Routes | None = None,
            rows: list[Routes] | None = None) -> T:
        """Run fn on the model with `version`'s state in use (as routed: a method OFF runs as in version 0); one
        call is one decoding step. With `rows` (each row's routes, which agree on every method but those that
        route per row), a method that routes per row gets each row's own route."""
        with self._lock, torch.inference_mode():
            for name, method in self.methods.items():
                if rows is not None and method.per_row:
                    method.use_rows(version, [row.get(name) for row in rows])
                    continue
                route = (routes or {}).get(name)
                method.use(*((0, None) if route == OFF else (version, route)))
            return fn(self.model)

    def shared_routes(self, routes: Routes) -> Routes:
        """The routes a batch's rows must share: all but those of methods that route per row."""
        return {name: route for name, route in routes.items() if not self.methods[name].per_row}


MAX_EXTENDED = 64  # versions a swap makes one by one from a held ancestor; from further back, the lineage is composed


def install_committed(serving: ServingModel, versions: VersionStore, version: int) -> float:
    """Make a committed version of the store current on the served model (its deltas checked by hash, read
    before decoding is paused); the seconds decoding was paused. A version whose parent, or an ancestor a few versions
    back, is held is made from that one's state where its method can tell how (ServedMethod.extend): versions
    committed faster than this process swaps them in are not composed from the whole lineage each time. Else it
    is composed from its lineage."""
    if not version:
        return serving.install(0, None)
    state = serving.extended(unheld(serving, versions, version), versions.load_delta)
    return serving.install(version, resolve(versions, version) if state is None else state)


def unheld(serving: ServingModel, versions: VersionStore, version: int) -> list[dict[str, Any]]:
    """The manifests from the newest held ancestor of `version` (not included) to `version`, oldest first; [] when
    none is held within MAX_EXTENDED versions."""
    chain = []
    for manifest in versions.ancestry(version):
        chain.append(manifest)
        if serving.holds(manifest["parent"] or 0):
            return chain[::-1]
        if len(chain) == MAX_EXTENDED:
            break
    return []
