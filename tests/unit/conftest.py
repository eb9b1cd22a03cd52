"""Hypothesis without per-example deadlines: `make test` runs the unit tests beside the integration tests, and a
busy machine must not turn a slow example into a failure. What the property tests check is correctness."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("nodeops", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("nodeops")
