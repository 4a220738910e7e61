"""Low-rank deltas on chosen linear layers, one set per document, applied only for the routed documents.

Each target projection gets a forward hook that adds `scale * (x @ A.T) @ B.T` of each active document (those
not in training stacked along the rank: one product for all of them), or, in a batch whose rows have routes of
their own, each row's documents' (two batched products for all rows); with no active document (a prompt routed
nowhere) the hooks add nothing and the model computes exactly what the base model computes. B starts at zero, so
a fresh document also starts as the base model.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from methods.routed.storage import unpack

Tensors = dict[str, torch.Tensor]  # "<module name>.A" / ".B" -> tensor
MLP = ("gate_proj", "up_proj", "down_proj")
STACKED_KEPT = 16  # sets of frozen documents whose stacked tensors are kept (a set per route in use)


@dataclass(frozen=True)
class LoraShape:
    rank: int = 4
    alpha: float = 8.0
    targets: tuple[str, ...] = MLP  # the projections a new delta covers (by name)
    layers: str = "all"  # the decoder layers it covers: "all", "odd", "even" or indices ("1,3,5")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def pick_layers(spec: str, count: int) -> tuple[int, ...]:
    """The decoder layers a layer spec names, of `count`: "all", "odd" (1, 3, ...), "even" (0, 2, ...) or "1,3,5"."""
    if spec in ("all", "odd", "even"):
        return tuple(i for i in range(count) if spec == "all" or i % 2 == (spec == "odd"))
    return tuple(sorted({int(part) for part in spec.split(",")}))


def layer_of(name: str) -> int | None:
    """The decoder layer a module belongs to ("model.layers.7.mlp.up_proj" -> 7)."""
    match = re.search(r"\.layers\.(\d+)\.", name)
    return int(match.group(1)) if match else None


def target_modules(model: nn.Module, shape: LoraShape) -> dict[str, nn.Module]:
    """The projections a delta may cover, by name: the targets and every MLP projection (a delta trained under other
    settings still applies), plain linear layers or the layers another method (PEFT) wrapped them in."""
    names = set(shape.targets) | set(MLP)
    return {name: module for name, module in model.named_modules()
            if name.rsplit(".", 1)[-1] in names and hasattr(module, "in_features")}


class RoutedLora:
    """The hooks on `model`, and the documents' tensors they can apply.

    A committed document's tensors are read from its version when a route first needs them, and at most `resident`
    documents (0: all) stay in memory, the least recently used read again when needed: memory follows use, not the
    number of documents taught. A document with no way to read it again (the one being trained) always stays."""

    def __init__(self, model: nn.Module, shape: LoraShape, resident: int = 0) -> None:
        self.shape = shape
        self.modules = target_modules(model, shape)
        self.resident = resident
        self.documents: OrderedDict[str, Tensors] = OrderedDict()  # in memory, least recently used first
        self.sources: dict[str, int] = {}  # the version each committed document's tensors are read from
        self._readers: dict[str, Callable[[], Tensors]] = {}
        self.hits = self.misses = 0  # routes' documents found in memory, and read from their version
        self.active: tuple[str, ...] | None = None  # the documents whose deltas are on
        # Or per row of the batch (activate_rows): each row's route, and per projection the rows' factors stacked.
        self.rows: tuple[tuple[str, ...] | None, ...] | None = None
        self._rows_key: tuple = ()
        self._rows_held: list[Tensors] = []  # the tensors the key's ids name, held so no other object takes an id
        self._row_factors: dict[str, tuple[torch.Tensor, torch.Tensor] | None] = {}
        self.trained: str | None = None  # the document whose tensors are being trained (not stacked)
        self._stacked: OrderedDict[tuple, tuple[list[Tensors], Tensors]] = OrderedDict()
        for name, module in self.modules.items():
            module.register_forward_hook(self._hook(name))

    def register(self, document_id: str, version: int, read: Callable[[], Tensors]) -> None:
        """How to read a committed document's tensors (from `version`), read when a route first needs them."""
        if self.sources.get(document_id) != version:
            self.documents.pop(document_id, None)
            self.sources[document_id] = version
        self._readers[document_id] = read

    def forget(self, document_id: str) -> None:
        self.documents.pop(document_id, None)
        self.sources.pop(document_id, None)
        self._readers.pop(document_id, None)

    def activate(self, route: tuple[str, ...] | None) -> None:
        """Turn the route's deltas on, reading those not in memory, and keep at most `resident` documents."""
        self.bring(route or ())
        self.active, self.rows = route, None

    def activate_rows(self, routes: list[tuple[str, ...] | None], restack: bool = False) -> None:
        """Each row of the next forward passes gets its own route's deltas (a row routed nowhere: none), so
        sequences routed to different documents share one pass over the base model. The rows' factors are stacked
        once per set of routes and tensors; `restack` stacks them again (a document in training changes its
        tensors in place)."""
        self.bring(tuple(dict.fromkeys(d for route in routes for d in route or ())))
        self.active, self.rows = None, tuple(routes)
        key = tuple((route, tuple(id(self.documents[d]) for d in route or ())) for route in routes)
        if restack or key != self._rows_key:
            held = [self.documents[d] for route in routes for d in route or ()]
            self._rows_key, self._rows_held, self._row_factors = key, held, {}

    def bring(self, needed: tuple[str, ...]) -> None:
        """Read the documents not in memory (their version checks each file against its hash) and evict the least
        recently used beyond `resident`, never `needed`."""
        for document_id in needed:
            if document_id in self.documents:
                self.hits += 1
                self.documents.move_to_end(document_id)
            else:
                self.misses += 1
                self.documents[document_id] = self._read(document_id)
        if self.resident and len(self.documents) > self.resident:
            keep = set(needed) | {self.trained}
            for document_id in [d for d in self.documents if d not in keep and d in self._readers]:
                if len(self.documents) <= self.resident:
                    break
                del self.documents[document_id]

    def _read(self, document_id: str) -> Tensors:
        """A document's tensors on the model's device, in the model's precision or the stored one, whichever is finer
        (bfloat16 -> float32 is exact, so a document read again computes exactly what it did)."""
        weight = next(next(iter(self.modules.values())).parameters())
        return {k: v.to(weight.device, torch.promote_types(v.dtype, weight.dtype))
                for k, v in unpack(self._readers[document_id]()).items()}

    def _hook(self, name: str):
        def add_deltas(_module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
            if self.rows is not None:
                return self._add_per_row(name, args[0], out)
            for a, b in self._factors(name, self.active):  # the documents' deltas add up (one subject's, or two)
                out = out + self._delta(args[0], a, b).to(out.dtype)
            return out
        return add_deltas

    def _delta(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return x.to(a.dtype) @ a.T @ b.T * self.shape.scale

    def _add_per_row(self, name: str, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Every row's deltas in two batched products (as Punica's BGMV): row i's documents' factors concatenated
        along the rank, padded with zeros to the longest; a row routed nowhere has only zeros, so it adds exact
        zeros to the base model's output."""
        if name not in self._row_factors:
            self._row_factors[name] = self._stack_rows(name)
        if (factors := self._row_factors[name]) is None:
            return out
        a, b = factors  # [rows, rank, in], [rows, out, rank]
        return out + (torch.bmm(torch.bmm(x.to(a.dtype), a.transpose(1, 2)), b.transpose(1, 2))
                      * self.shape.scale).to(out.dtype)

    def _stack_rows(self, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        pairs = [self._factors(name, route) for route in self.rows or ()]
        rank = max((sum(a.shape[0] for a, _ in row) for row in pairs), default=0)
        if not rank:
            return None
        module, (first, _) = self.modules[name], next(pair for row in pairs for pair in row)
        a_rows = torch.zeros(len(pairs), rank, module.in_features, dtype=first.dtype, device=first.device)
        b_rows = torch.zeros(len(pairs), module.out_features, rank, dtype=first.dtype, device=first.device)
        for i, row in enumerate(pairs):
            start = 0
            for a, b in row:
                a_rows[i, start : start + a.shape[0]] = a
                b_rows[i, :, start : start + a.shape[0]] = b
                start += a.shape[0]
        return a_rows, b_rows

    def _factors(self, name: str, active: tuple[str, ...] | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The (A, B) pairs that give the documents' deltas at one projection: the others' stacked into one pair of
        summed rank (one product however many documents a subject has), the trained one's on its own."""
        if not active:
            return []
        pairs = []
        if frozen := [d for d in active if d != self.trained]:
            pairs.append(self._stack(frozen))
        if self.trained in active:
            pairs.append(self.documents[self.trained])
        return [(t[f"{name}.A"], t[f"{name}.B"]) for t in pairs if f"{name}.A" in t]  # a delta may cover some layers

    def _stack(self, frozen: list[str]) -> Tensors:
        """The frozen documents' tensors concatenated along the rank, kept for the last few sets of documents (a
        document's tensors read again are a new dict, so they are stacked again)."""
        if len(frozen) == 1:
            return self.documents[frozen[0]]
        key = tuple((d, id(self.documents[d])) for d in frozen)
        if key not in self._stacked:
            held = [self.documents[d] for d in frozen]  # held with the entry: the ids in the key stay theirs
            stacked = {}
            for name in self.modules:
                pairs = [(t[f"{name}.A"], t[f"{name}.B"]) for t in held if f"{name}.A" in t]
                if pairs:
                    stacked[f"{name}.A"] = torch.cat([a for a, _ in pairs], dim=0).detach()
                    stacked[f"{name}.B"] = torch.cat([b for _, b in pairs], dim=1).detach()
            self._stacked[key] = (held, stacked)
            while len(self._stacked) > STACKED_KEPT:
                self._stacked.popitem(last=False)
        self._stacked.move_to_end(key)
        return self._stacked[key][1]

    def fresh(self, seed: int) -> Tensors:
        """New trainable tensors for one document: A small and random, B zero (the base model's output)."""
        gen = torch.Generator().manual_seed(seed)
        tensors: Tensors = {}
        layers = pick_layers(self.shape.layers, 1 + max(layer_of(name) or 0 for name in self.modules))
        for name, module in self.modules.items():
            if name.rsplit(".", 1)[-1] not in self.shape.targets or layer_of(name) not in layers:
                continue
            a = torch.randn(self.shape.rank, module.in_features, generator=gen) / module.in_features**0.5
            device = next(module.parameters()).device
            tensors[f"{name}.A"] = nn.Parameter(a.to(device))
            tensors[f"{name}.B"] = nn.Parameter(torch.zeros(module.out_features, self.shape.rank, device=device))
        return tensors
