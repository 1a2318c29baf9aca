"""How long a session's levels took (``Timing``), and what the estimates of the time left
scale from once the first level ran (``report.plan.estimate_basis``)."""

from __future__ import annotations

__all__ = ["Timing"]


class Timing:
    """The seconds each level took (by point index: calibration and warm-up included) and
    the basis of the estimates of the time left (None until the first level ran)."""

    def __init__(self) -> None:
        self.level_seconds: dict[int, float] = {}
        self.basis: tuple[float | None, float] | None = None

    def level_took(self, idx: int, seconds: float) -> bool:
        """Keep that the level of point ``idx`` took ``seconds``; True for the session's
        first level timed (the one the estimates scale from)."""
        first = not self.level_seconds
        self.level_seconds[idx] = seconds
        return first
