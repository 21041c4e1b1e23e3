"""Prometheus metrics of the API, multiprocess-safe under gunicorn when PROMETHEUS_MULTIPROC_DIR is set."""

from __future__ import annotations

import os
import time

from flask import Flask, Response, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)


class Metrics:
    """The API's metric objects, one set per app (registered on the app's own registry)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "fleetfish_api_requests",
            "Redfish requests by route, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "fleetfish_api_request_seconds",
            "Redfish request latency",
            ["route", "method"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.deferred_power_ons = Counter(
            "fleetfish_api_deferred_power_ons",
            "Reset requests deferred until virtual media is attached",
            registry=self.registry,
        )

    def render(self) -> bytes:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)


def install(app: Flask) -> Metrics:
    metrics = Metrics()

    @app.before_request
    def _start_timer():
        g.started = time.perf_counter()

    @app.after_request
    def _observe(resp: Response) -> Response:
        route = request.url_rule.rule if request.url_rule else "unmatched"
        started = g.get("started")
        metrics.requests.labels(route, request.method, str(resp.status_code)).inc()
        if started is not None:
            metrics.latency.labels(route, request.method).observe(time.perf_counter() - started)
        return resp

    @app.get("/metrics")
    def metrics_endpoint():
        return Response(metrics.render(), mimetype=CONTENT_TYPE_LATEST)

    return metrics
