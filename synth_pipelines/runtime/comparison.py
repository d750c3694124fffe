"""Is one run's pass@1 better than another's? Wilson intervals and Fisher's exact test.

pass@1 is the fraction of assessed attempts that passed (attempts whose assessment could
not be made are counted apart, as in `synth run show`). The test is exact: the two runs'
attempts form a 2x2 table (passed / not, per run) and Fisher's test sums hypergeometric
probabilities, so small samples get honest p-values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z_95 = 1.959963984540054


@dataclass(frozen=True)
class Proportion:
    passed: int
    assessed: int

    @property
    def rate(self) -> float | None:
        return self.passed / self.assessed if self.assessed else None

    def wilson(self, z: float = Z_95) -> tuple[float, float] | None:
        """The Wilson score interval (95% by default)."""
        n = self.assessed
        if n == 0:
            return None
        p = self.passed / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)


def _log_hypergeometric(k: int, passed: int, failed: int, drawn: int) -> float:
    """log P(k passes among `drawn` attempts) when `passed` of all attempts passed."""

    def log_comb(n: int, r: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)

    return log_comb(passed, k) + log_comb(failed, drawn - k) - log_comb(passed + failed, drawn)


@dataclass(frozen=True)
class FisherResult:
    two_sided: float
    greater: float
    """P(candidate passes at least as often as observed | both runs are equally good)."""


def fisher_exact(baseline: Proportion, candidate: Proportion) -> FisherResult:
    passed = baseline.passed + candidate.passed
    failed = baseline.assessed + candidate.assessed - passed
    drawn = candidate.assessed
    low, high = max(0, drawn - failed), min(drawn, passed)
    probabilities = {
        k: math.exp(_log_hypergeometric(k, passed, failed, drawn)) for k in range(low, high + 1)
    }
    observed = probabilities.get(candidate.passed, 0.0)
    # A relative tolerance, as in the usual implementations, so that tables as likely as
    # the observed one are not dropped by rounding.
    two_sided = sum(p for p in probabilities.values() if p <= observed * (1 + 1e-7))
    greater = sum(p for k, p in probabilities.items() if k >= candidate.passed)
    return FisherResult(min(1.0, two_sided), min(1.0, greater))
