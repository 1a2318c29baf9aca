"""The built-in simulated engine: an OpenAI-compatible streaming server whose timing comes
from a model of continuous batching on a chosen GPU and model (``docs/sim.md``).

Run it with ``python -m pytest_llmslo.sim --profile NAME --model NAME``. The pieces:
``costmodel`` (roofline step times), ``scheduler`` (token budget, KV blocks, preemption,
prefix caching on a simulated clock), ``profiles`` (named setups), ``tokens`` (the token
count rule), ``httpd`` and ``server`` (the API on the wall clock), ``metrics_exposition``
(its ``/metrics``), ``lateness`` (how late its token writes are). ``truth_server`` is a
separate fixed-timing server for the load generator's own tests (``python -m
pytest_llmslo.sim.truth_server``), served by one or several processes (``prefork``).
"""

from __future__ import annotations

from .costmodel import CostModel, Gpu, ModelSpec, StepCost
from .profiles import DEFAULT_PROFILE, PROFILES, EnginePreset, Profile, get_profile
from .scheduler import Scheduler, SchedulerConfig, SimRequest, StepResult

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES",
    "CostModel",
    "EnginePreset",
    "Gpu",
    "ModelSpec",
    "Profile",
    "Scheduler",
    "SchedulerConfig",
    "SimRequest",
    "StepCost",
    "StepResult",
    "get_profile",
]
