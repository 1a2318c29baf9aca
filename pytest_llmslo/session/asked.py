"""The workload asked is the workload gated: a level whose engine answered another workload
than the one asked is inconclusive, not a pass.

A level is flagged not comparable when more of its completed requests than
``--max-short-outputs`` returned fewer tokens than the pinned output length (the server
ignores ``ignore_eos``/``min_tokens``), or more than ``--max-usage-mismatch`` reported a
``usage`` count that disagrees with the stream (``level.record_point`` writes the note).
Its latencies are those of another workload, so after the body the test is
``Inconclusive`` with that note as its headline, whatever the gates said, and the run
exits non-zero. The opt-out is explicit: raise the allowed share (``--max-short-outputs
100%``, ``--max-usage-mismatch 100%``), or stop pinning the output length
(``--pin-output=false``) when short outputs are expected.

The same holds for an engine that does not decode deterministically where the eval needs
it: when the requests ask for ``temperature: 0`` (``--extra-body``) and an eval item the
level asked twice (``evals.tasks.repeat_of``) got two different answers, the answers'
digests cannot show drift across a bump, and the level is inconclusive with the items
named. Not asking for temperature 0 is the opt-out.
"""

from __future__ import annotations

from pytest_llmslo.errors import Inconclusive

from .state import Session, TestContext, primary

__all__ = ["asked_workload_gate"]


def asked_workload_gate(state: Session, ctx: TestContext) -> None:
    """Raise ``Inconclusive`` when the test's level ran another workload than asked; the
    reason is kept on the point (``judged.asked_reason``), so every report shows the level
    inconclusive with it, as the test's exception does."""
    from pytest_llmslo.answered import asked_reason

    __tracebackhide__ = True
    idx = primary(ctx)
    if idx is None:
        return
    point = state.points[idx]
    quality = point.quality or {}
    unstable = quality.get("unstable")
    greedy = (ctx.settings.extra_body or {}).get("temperature") == 0
    if point.comparable and greedy and unstable:
        pairs = ", ".join(f"{a}/{b}" for a, b in unstable)
        why = (
            "the engine is not deterministic at temperature 0: "
            f"{len(unstable)} of {quality.get('repeated')} eval items asked twice got two "
            f"different answers (requests {pairs}), so its answers cannot show drift across "
            "a bump"
        )
        point = state.book.update(idx, quality={**quality, "nondeterministic": why})
    reason = asked_reason(point)
    if reason is not None:
        raise Inconclusive(f"inconclusive at {point.level.label}: {reason}")
