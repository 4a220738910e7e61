"""/probes (admin): the must-keep probes every new version is gated on, and the calibrated NF suite."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from core.probes import TooManyProbes, to_json
from core.scoring import Probe
from service.auth import needs
from service.dependencies import RuntimeDep
from service.errors import field_error
from service.schemas import ProbesRequest

router = APIRouter(dependencies=[Depends(needs("admin"))])


@router.post("/probes", status_code=201)
def add_probes(req: ProbesRequest, runtime: RuntimeDep) -> dict[str, Any]:
    try:
        merged = runtime.suites.add_must_keep([Probe(p.prompt, p.answer) for p in req.probes],
                                              runtime.settings.limits.max_must_keep_probes)
    except TooManyProbes as exc:
        raise field_error("probes", "max_items", str(exc)) from exc
    return {"must_keep": to_json(merged)}


@router.delete("/probes")
def remove_probes(req: ProbesRequest, runtime: RuntimeDep) -> dict[str, Any]:
    return {"must_keep": to_json(runtime.suites.remove_must_keep([Probe(p.prompt, p.answer) for p in req.probes]))}


@router.get("/probes")
def list_probes(runtime: RuntimeDep) -> dict[str, Any]:
    suite = runtime.suites.nf_suite() or {"probes": []}
    return {"not_to_forget": suite["probes"], "must_keep": to_json(runtime.suites.must_keep())}
