"""Run-to-run noise of the simulated engine: a per-run speed factor and a per-step jitter,
seeded, off by default (``python -m pytest_llmslo.sim --run-noise 0.015 --step-jitter
0.03``).

A real engine is not the same engine twice: another node, clocks, a warmer cache, the
allocator's luck. The sim is deterministic unless told otherwise, so two identical sim runs
agree to 0.00 % and a regression check tried on them never meets noise. With noise on:

- ``speed`` multiplies every step's time: 1.10 is an engine 10 % slower (the "B" of an
  A/B test); the run's own factor, ``exp(N(0, run_sigma))``, drawn once when the sim
  starts, multiplies it;
- each step's time is multiplied by ``max(0.5, N(1, step_sigma))`` on top.

Sizing, with its source: the coefficient of variation of output throughput over repeated
identical runs measured on one host (vllm-project/vllm issue #53436, 2026) was 0.36-0.64 %
for vLLM and 0.11-0.28 % for SGLang at concurrency 8-16, and 2.54 % for SGLang at 32 (with
speculative decoding at concurrency 1-4, 7.5-19.7 %). No figure for the per-step spread
was found; ``STEP_SIGMA`` is an assumption. The defaults of the power benchmark
(``RUN_SIGMA`` = 1.5 %) sit above every figure but the speculative-decoding outliers, so
its false-alarm rate is an upper bound for such engines.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any

from .costmodel import CostModel, StepCost

__all__ = ["RUN_SIGMA", "STEP_SIGMA", "NoisyCostModel", "SimNoise"]

#: The per-run spread the power benchmark uses (1.5 %; module docstring).
RUN_SIGMA = 0.015
#: The per-step spread it uses (3 %; an assumption).
STEP_SIGMA = 0.03


@dataclass(frozen=True, slots=True)
class SimNoise:
    """The noise of one sim run: ``speed`` (the fixed factor times the run's drawn one),
    ``step_sigma`` and the ``seed`` of the per-step draws."""

    speed: float = 1.0
    step_sigma: float = 0.0
    seed: int = 0

    @property
    def active(self) -> bool:
        return self.speed != 1.0 or self.step_sigma > 0.0

    @classmethod
    def draw(
        cls,
        *,
        speed: float = 1.0,
        run_sigma: float = 0.0,
        step_sigma: float = 0.0,
        seed: int | None,
    ) -> SimNoise:
        """The noise of a run starting now: its speed factor drawn with ``seed`` (None: a
        fresh seed, so every start is another run). ``ValueError`` for a bad value."""
        if not speed > 0 or not math.isfinite(speed):
            raise ValueError(f"--speed-factor must be a positive number, got {speed}")
        for name, v in (("--run-noise", run_sigma), ("--step-jitter", step_sigma)):
            if not 0 <= v < 1:
                raise ValueError(f"{name} must be between 0 and 1 (a fraction), got {v}")
        seed = random.SystemRandom().randrange(2**32) if seed is None else seed
        rng = random.Random(seed)
        factor = math.exp(rng.gauss(0.0, run_sigma)) if run_sigma else 1.0
        return cls(speed * factor, step_sigma, seed)

    def to_dict(self) -> dict[str, Any]:
        return {"speed": self.speed, "step_sigma": self.step_sigma, "seed": self.seed}


@dataclass(frozen=True, slots=True)
class NoisyCostModel(CostModel):
    """A ``CostModel`` whose step times carry ``noise``."""

    noise: SimNoise = field(default_factory=SimNoise)
    _rng: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        CostModel.__post_init__(self)
        object.__setattr__(self, "_rng", random.Random(self.noise.seed ^ 0x5EED))

    def step(self, seqs: Any) -> StepCost:
        cost = CostModel.step(self, seqs)
        if cost.seqs == 0:
            return cost
        scale = self.noise.speed
        if self.noise.step_sigma:
            scale *= max(0.5, self._rng.gauss(1.0, self.noise.step_sigma))
        return replace(cost, total_s=cost.total_s * scale)
