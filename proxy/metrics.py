"""Prometheus metrics of one proxy process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ProxyMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "synth_proxy_requests",
            "Requests by route and status.",
            ["route", "status"],
            registry=self.registry,
        )
        self.prompt_tokens = Counter(
            "synth_proxy_prompt_tokens", "Prompt tokens sampled.", ["model"], registry=self.registry
        )
        self.completion_tokens = Counter(
            "synth_proxy_completion_tokens", "Tokens sampled.", ["model"], registry=self.registry
        )
        self.reused_prefix_tokens = Counter(
            "synth_proxy_reused_prefix_tokens",
            "Prompt tokens taken from the prefix cache.",
            registry=self.registry,
        )
        self.added_latency = Histogram(
            "synth_proxy_added_seconds",
            "Time the proxy adds to a call (sampling excluded).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.sample_latency = Histogram(
            "synth_proxy_sample_seconds",
            "Time spent waiting for the model backend.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "synth_proxy_in_flight", "Calls being served.", ["kind"], registry=self.registry
        )
        self.staged_pending = Gauge(
            "synth_proxy_evidence_pending",
            "Staged calls not yet published.",
            registry=self.registry,
        )
        self.published_calls = Gauge(
            "synth_proxy_evidence_published_calls",
            "Calls published since start.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
