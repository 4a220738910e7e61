"""GET /metrics: Prometheus' text format, for a key with the metrics scope (a scraper)."""
from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from service.auth import needs
from service.dependencies import MetricsDep
from service.errors import ApiError

router = APIRouter()


@router.get("/metrics", dependencies=[Depends(needs("metrics"))])
def prometheus_metrics(metrics: MetricsDep) -> Response:
    if not metrics.enabled:
        raise ApiError(404, "not_found", "metrics are off (CKL_METRICS=false)")
    return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
