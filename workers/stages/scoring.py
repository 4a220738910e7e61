"""Scoring probes as the served model would answer them: each probe with the routes it would take (a method that
routes per row gives each row its own, so probes routed to different documents share a forward pass), in batches,
with a rest after each batch."""
from __future__ import annotations

import time
from collections.abc import Collection, Hashable, Iterator

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.routing.table import by_method
from core.scoring import Probe, greedy_continuations, score_probes
from workers import gate
from workers.held import Held
from workers.yielding import Rests

SCORE_BATCH = 32  # probes scored in one forward pass
Scores = dict[Probe, float]


def unscored(suites: dict[str, list[Probe]], scores: Scores, deferred: bool) -> dict[Probe, None]:
    """A deferred run's learned facts and neighbour prompts that have no score yet (none for a run not deferred), in
    the suites' order (scored in batches in that order, as any run scores them)."""
    return dict.fromkeys(p for name in gate.DEFERRABLE for p in suites[name] if p not in scores) if deferred else {}


class Scorer:
    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, held: Held, rests: Rests) -> None:
        self.model, self.tokenizer, self.held, self.rests = model, tokenizer, held, rests

    def score(self, suites: dict[str, list[Probe]], known: Scores | None = None,
              left_out: Collection[Probe] = ()) -> tuple[gate.SuiteScores, Scores]:
        """Every suite's probe scores, and every score there is now (`known`'s and those scored): probes in `known`
        keep their score, those `left_out` (a deferred run's never scored: `unscored`) are None."""
        scores = dict(known or {})
        todo = [p for suite in suites.values() for p in suite if p not in scores and p not in left_out]
        self.score_into(scores, todo)
        return gate.SuiteScores(**{name: [scores.get(p) for p in probes] for name, probes in suites.items()}), scores

    def score_into(self, scores: Scores, probes: list[Probe], parent: bool = False) -> None:
        """`probes`' scores added to `scores`; `parent`: routed as in the candidate's parent."""
        for batch in self._batches(probes, parent):
            scores.update(zip(batch, score_probes(self.model, self.tokenizer, batch)))

    def continuations(self, probes: list[Probe], tokens: int) -> list[tuple[Probe, str]]:
        """Each probe's greedy continuation of `tokens` tokens, as routed for it."""
        made = []
        for group in self.routed_groups(probes):
            outs = greedy_continuations(self.model, self.tokenizer, [p.prompt for p in group], tokens)
            made += list(zip(group, outs))
        return made

    def _routes(self, probes: list[Probe], parent: bool) -> dict[Probe, dict[str, Hashable | None]]:
        """Each probe's route on every held method (core/routing/), as the candidate routes it or as its parent does:
        each probe routed once."""
        candidate, kinds = self.held.candidate, self.held.per_document()
        routing = candidate.parent_route if parent else candidate.route
        return {p: by_method(routing(p.prompt, p.namespace), candidate.method_of, kinds) for p in dict.fromkeys(probes)}

    def _batches(self, probes: list[Probe], parent: bool = False) -> Iterator[list[Probe]]:
        """The probes in batches of one forward pass, each batch's routes on while the caller scores it: a method
        that routes per row (the routed one) gives each row its own route; other methods' routes split the batches.
        None on after. A rest follows each batch's work. `parent`: routed as in the candidate's parent."""
        per_row = [name for name, m in self.held.methods.items() if m.per_row]
        routes = self._routes(probes, parent)
        for group in self.routed_groups(probes, rows_apart=True, parent=parent, routes=routes):
            for start in range(0, len(group), SCORE_BATCH):
                batch = group[start:start + SCORE_BATCH]
                for name in per_row:
                    self.held.methods[name].activate_rows([routes[p][name] for p in batch])
                clock = time.perf_counter()
                yield batch
                self.rests.after_slice(time.perf_counter() - clock)

    def routed_groups(self, probes: list[Probe], rows_apart: bool = False, parent: bool = False,
                      routes: dict[Probe, dict[str, Hashable | None]] | None = None) -> Iterator[list[Probe]]:
        """The probes in groups that take the same routes on every method (with `rows_apart`, on every method that
        does not route per row), each group's routes on while the caller uses it; none after. `parent`: as in the
        candidate's parent; `routes`: each probe's, where the caller has them."""
        methods = self.held.methods
        routes = routes if routes is not None else self._routes(probes, parent)
        groups: dict[tuple, list[Probe]] = {}
        for probe, routed in routes.items():
            key = tuple((name, route) for name, route in routed.items() if not (rows_apart and methods[name].per_row))
            groups.setdefault(key, []).append(probe)
        try:
            for key, group in groups.items():
                for name, route in key:
                    methods[name].activate(route)
                yield group
        finally:
            for method in methods.values():
                method.activate(None)
