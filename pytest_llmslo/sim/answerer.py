"""How well the sim engine's "model" answers eval items: a seeded error model.

The sim reads an eval item back from a prompt (``evals.solve``: the built-in arithmetic and
retrieval items) and says the right answer, as its first output token, unless its error
model says otherwise. The chance of a wrong answer is

    base_error + quant_penalty + pressure_error * pressure + preempt_error * preemptions

(at most 1), where ``pressure`` is how far the KV cache's usage, when the answer is
emitted, is past ``pressure_from`` (0 below it, 1 when full) and ``preemptions`` how often
the request was preempted before its first token. Whether an item is wrong is drawn from
``seed`` and the item's prompt alone: the same item on the same profile under the same
pressure gets the same answer in every run, and raising the quantisation penalty turns
exactly the items whose draw falls in the added band wrong (a bump of the engine's
precision, as ``llmslo compare`` sees it). A wrong answer (``evals.tasks.wrong_answer``)
is the right integer moved by 1 to 9, drawn the same way (an ordering's first number
moved, a schema's object without its first property). A prompt that is no eval item gets
the usual filler words.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..evals import solve
from ..evals.tasks import wrong_answer
from .scheduler import SimRequest

__all__ = ["Answerer", "QualityModel", "prompt_text", "quality_from_mapping"]


@dataclass(frozen=True, slots=True)
class QualityModel:
    """The error model of a profile's answers (see the module docstring)."""

    base_error: float = 0.02
    quant_penalty: float = 0.0
    pressure_error: float = 0.6
    pressure_from: float = 0.6
    preempt_error: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "seed":
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"quality.{f.name} must be a number, got {v!r}")
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"quality.{f.name} must be between 0 and 1, got {v!r}")

    def error(self, kv_usage: float, preemptions: int) -> float:
        """The chance of a wrong answer at this KV usage after so many preemptions."""
        span = 1.0 - self.pressure_from
        pressure = 0.0 if span <= 0 else max(0.0, min(1.0, (kv_usage - self.pressure_from) / span))
        p = self.base_error + self.quant_penalty + self.pressure_error * pressure
        return min(1.0, p + self.preempt_error * preemptions)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def quality_from_mapping(d: Any, base: QualityModel) -> QualityModel:
    """``base`` with the fields a profile file's ``"quality"`` object gives."""
    if not isinstance(d, Mapping):
        raise ValueError(f"the profile's 'quality' must be an object, got {type(d).__name__}")
    known = {f.name for f in fields(QualityModel)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown quality key(s) {unknown}; valid: {sorted(known)}")
    return QualityModel(**{**base.to_dict(), **d})


def prompt_text(body: Mapping[str, Any], chat: bool) -> str:
    """The text an eval item would be in: the last message's (chat) or the prompt."""
    if chat:
        messages = body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        content = last.get("content") if isinstance(last, Mapping) else None
        return content if isinstance(content, str) else ""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else ""


def _draw(seed: int, prompt: str, salt: str) -> int:
    h = hashlib.blake2b(f"{seed}:{salt}:".encode() + prompt.encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


@dataclass(frozen=True, slots=True)
class Answer:
    """What the sim will say to one eval item: the right answer and the item's draws."""

    right: str
    draw: float  # uniform in [0, 1): wrong when below the error
    shift: int  # 1..9: how far a wrong answer is from the right one


class Answerer:
    """The sim's answers to eval items, under its profile's error model."""

    def __init__(self, model: QualityModel, kv_usage: Callable[[], float]) -> None:
        self.model = model
        self.kv_usage = kv_usage
        self.asked = 0
        self.wrong = 0

    def read(self, body: Mapping[str, Any], chat: bool) -> Answer | None:
        """The eval item of a request, or None when it carries none."""
        prompt = prompt_text(body, chat)
        right = solve(prompt) if prompt else None
        if right is None:
            return None
        seed = self.model.seed
        draw = _draw(seed, prompt, "draw") / 2**64
        return Answer(right, draw, 1 + _draw(seed, prompt, "shift") % 9)

    def say(self, answer: Answer, req: SimRequest) -> str:
        """The first output token for ``answer``, now."""
        self.asked += 1
        if answer.draw < self.model.error(self.kv_usage(), req.preemptions):
            self.wrong += 1
            return wrong_answer(answer.right, answer.shift)
        return answer.right
