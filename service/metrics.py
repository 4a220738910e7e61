"""Prometheus metrics for GET /metrics: requests by route and status and their latency, generation's time to
first token and tokens, the generations holding a slot, the routed deltas held in memory and how often a route
found its delta there, and, read from the data folder at each scrape (the worker may be another process), queue
depth, documents by status, job and gate durations, the current knowledge version and its NF accuracy."""
from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from core.lifecycle import PENDING
from serving import forgetting

LATENCY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# A label's values must be few: any other method a client invents is counted as "other".
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
TIMINGS = {"train_s": "ckl_job_train_seconds", "gate_s": "ckl_job_gate_seconds",
           "score_before_s": "ckl_job_score_before_seconds"}


def method_label(method: str) -> str:
    return method if method in METHODS else "other"


class DataFolderCollector(Collector):
    """What the documents and versions say now; `runtime` is the API's Runtime."""

    def __init__(self, runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        counts = self.runtime.documents.counts()
        by_status = GaugeMetricFamily("ckl_documents", "Documents by status", labels=["status"])
        for status, count in sorted(counts.items()):
            by_status.add_metric([status], count)
        yield by_status
        yield GaugeMetricFamily("ckl_queue_depth", "Documents queued or in training",
                                value=sum(counts.get(s.value, 0) for s in PENDING))
        for key, (count, total) in self.runtime.documents.timings().items():
            yield SummaryMetricFamily(TIMINGS[key], f"Seconds per finished job ({key})", count_value=count,
                                      sum_value=total)
        swaps = list(self.runtime.swaps)
        yield SummaryMetricFamily("ckl_swap_pause_seconds", "Decoding paused by version swaps (the last 1000)",
                                  count_value=len(swaps), sum_value=sum(swaps))
        yield GaugeMetricFamily("ckl_swap_pause_seconds_max", "The longest of those pauses", value=max(swaps, default=0))
        if self.runtime.serving is not None:
            yield from delta_cache(self.runtime.serving.methods.values())
        versions = self.runtime.versions
        current = versions.current()
        yield GaugeMetricFamily("ckl_knowledge_version", "The current knowledge version", value=current)
        nf = forgetting.version_row(versions.manifest(current))["nf_acc"]
        if nf is not None:
            yield GaugeMetricFamily("ckl_nf_accuracy", "NF-suite accuracy of the current version", value=nf)


def delta_cache(methods) -> Iterator[Metric]:
    """Deltas held in memory, and how often a route found its delta there (read from disk otherwise)."""
    stats = [method.stats() for method in methods]
    yield GaugeMetricFamily("ckl_deltas_resident", "Routed deltas held in memory",
                            value=sum(s.get("resident", 0) for s in stats))
    for name, help_text in (("hits", "A route's delta found in memory"), ("misses", "A route's delta read from disk")):
        yield CounterMetricFamily(f"ckl_delta_cache_{name}", help_text, value=sum(s.get(name, 0) for s in stats))


class Metrics:
    """The app's Prometheus registry; with `enabled` false (CKL_METRICS=false) nothing is counted."""

    def __init__(self, runtime, enabled: bool = True) -> None:
        self.enabled = enabled
        self.registry = CollectorRegistry()  # one per app: tests build many apps in one process
        self.requests = Counter("ckl_requests", "HTTP requests", ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("ckl_request_seconds", "Request latency", ["route"], buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.first_token = Histogram("ckl_generate_first_token_seconds", "Time to the first generated token",
                                     buckets=LATENCY_BUCKETS, registry=self.registry)
        self.tokens = Counter("ckl_generated_tokens", "Tokens generated", registry=self.registry)
        # Counted even with metrics off: a slot a client's departure never gave back shows here.
        self.admitted = Gauge("ckl_generations_admitted", "Generations decoding or waiting for a row (each holds "
                              "a slot until it ends, its client goes, or the decoder retires it)", registry=self.registry)
        self.registry.register(DataFolderCollector(runtime))

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        if not self.enabled:
            return
        self.requests.labels(route, method_label(method), str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def generation(self, first_token_s: float, tokens: int) -> None:
        if not self.enabled:
            return
        self.first_token.observe(first_token_s)
        self.tokens.inc(tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
