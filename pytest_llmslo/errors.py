"""The exception tree of pytest-llmslo.

    LlmSloError
    ├── ConfigError            a bad option, ini key, marker argument or config file value
    ├── WorkloadError          a dataset that cannot be read or a workload that cannot be built
    ├── EngineError            anything about starting or talking to an engine
    │   ├── EngineUnavailable  the engine cannot run here (no docker, no GPU, not installed): skip
    │   ├── EngineStartError   it was started but never became ready (carries the log tail)
    │   └── EngineDiedError    it became ready and then exited while a load ran
    ├── LoadError              the load generator could not run a load at all
    │   └── LoadInterrupted    Ctrl-C or cancellation mid-run; ``.run`` keeps what was measured
    ├── Inconclusive           the client, not the engine, was the bottleneck (after retries):
    │                          neither a pass nor an SLO failure; the test errors with it
    └── SloViolation           (also an AssertionError) an SLO gate failed; message has the numbers
        └── RegressionError    a comparison against a baseline found a regression

Failures of single requests (HTTP errors, in-stream errors, timeouts, truncated streams) are
never raised: they are recorded on the request's ``RequestRecord`` and counted.

``LlmSloWarning`` (a ``UserWarning``) flags a measurement that ran but should not be
trusted as asked: a server that ignored the pinned output length, for example.
"""

from __future__ import annotations


class LlmSloError(Exception):
    """Base of every error raised by pytest-llmslo."""


class ConfigError(LlmSloError, ValueError):
    """A setting has a bad value. The message names the source (CLI, env, ini, marker, file)
    and lists the valid choices."""


class WorkloadError(LlmSloError):
    """A workload or dataset cannot be built or read."""


class EngineError(LlmSloError):
    """Base for engine failures."""


class EngineUnavailable(EngineError):
    """The engine cannot run on this machine (missing docker daemon, GPU, package); tests skip."""


class EngineStartError(EngineError):
    """The engine did not become ready. ``log_tail`` holds the last lines of its output."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        full = message if not log_tail else f"{message}\n--- engine log (tail) ---\n{log_tail}"
        super().__init__(full)


class EngineDiedError(EngineError):
    """The engine exited after it was ready."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        full = message if not log_tail else f"{message}\n--- engine log (tail) ---\n{log_tail}"
        super().__init__(full)


class LoadError(LlmSloError):
    """The load could not be run at all (bad endpoint, nothing to send)."""


class LoadInterrupted(LoadError):
    """The run was interrupted; ``run`` is the partial ``Run`` (records measured so far),
    ``signal`` the signal that interrupted it (``"SIGINT"``, ``"SIGTERM"``) when one did."""

    def __init__(self, message: str, run: object | None = None) -> None:
        self.run = run
        self.signal: str | None = None
        super().__init__(message)


class Inconclusive(LlmSloError):
    """The measurement cannot be trusted: the load generator was starved, overloaded or
    stalled (``verdict.invalid_reasons`` says how), also after the retries. Not an
    ``AssertionError``: the engine did not fail its SLO, nothing was shown either way."""

    def __init__(self, message: str, verdict: object | None = None) -> None:
        self.verdict = verdict
        super().__init__(message)


class SloViolation(LlmSloError, AssertionError):
    """An SLO gate failed. ``verdict`` holds the evaluated objectives."""

    def __init__(self, message: str, verdict: object | None = None) -> None:
        self.verdict = verdict
        super().__init__(message)


class RegressionError(SloViolation):
    """A run regressed against its baseline beyond the tolerance."""


class LlmSloWarning(UserWarning):
    """A measurement ran but does not measure what was asked (shown in pytest's warning
    summary; the level's report says the same)."""
