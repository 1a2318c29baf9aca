"""Fitting prompt lengths to the server before a run, with a few probe requests.

Without a tokenizer a prompt of n words is taken to be ``tokens_per_word * n + overhead``
tokens; ``calibrate`` fits those two numbers to the ``prompt_tokens`` the server reports
for probe prompts of a few sizes. With a tokenizer, ``measure_overhead`` finds the tokens
the server adds around a prompt (chat template, BOS) from probes of exact token counts.
Each probe asks for one output token; the first probe without an answer ends the probing.
"""

from __future__ import annotations

from typing import Any

from .client import ClientSettings, RawExchange, build_record, request_body
from .promptlengths import LengthModel, fit_length_model
from .transports import make_transport
from .workload import WorkloadSpec, calibration_prompts, overhead_prompts

__all__ = ["calibrate", "measure_overhead"]


async def probe_prompt_tokens(
    client: ClientSettings, sizes: list[int], texts: list[str]
) -> tuple[list[int], list[int], list[str]]:
    """Send each probe text (``max_tokens=1``) and read the server's ``prompt_tokens``.
    Returns (sizes that got an answer, their prompt_tokens, errors of the others). The
    first probe without an answer ends the probing: a server that failed or stalled on one
    will not answer the next, and each try would cost a request deadline."""
    transport = make_transport(client, 1)
    sent: list[int] = []
    tokens: list[int] = []
    errors: list[str] = []
    try:
        for size, text in zip(sizes, texts, strict=True):
            raw = RawExchange()
            await transport.send(request_body(client, text, 1), raw)
            rec = build_record(-1, raw.sent_ns, raw)
            if rec.prompt_tokens:
                sent.append(size)
                tokens.append(rec.prompt_tokens)
            else:
                errors.append(rec.error or "no prompt_tokens in usage")
                break
    finally:
        await transport.aclose()
    return sent, tokens, errors


async def calibrate(
    client: ClientSettings, workload: WorkloadSpec
) -> tuple[LengthModel, dict[str, Any]]:
    """Fit tokens-per-word to the server's reported prompt_tokens with a few probes."""
    sizes = sorted({max(1, workload.isl // 2), workload.isl, max(2, workload.isl * 3 // 2)})
    texts = calibration_prompts(workload, sizes)
    words, tokens, errors = await probe_prompt_tokens(client, sizes, texts)
    if not words:
        return LengthModel(), {"fitted": False, "error": errors[0] if errors else "no probes"}
    lm = fit_length_model(words, tokens)
    return lm, {"fitted": True, "probe_words": words, "probe_tokens": tokens, **lm.to_dict()}


async def measure_overhead(
    client: ClientSettings, workload: WorkloadSpec
) -> tuple[LengthModel, dict[str, Any]]:
    """With a tokenizer: the tokens the server adds around a prompt (chat template, BOS).

    Probes of exactly k tokens of the tokenizer are sent (``max_tokens=1``); the server's
    ``prompt_tokens`` minus k is the overhead. It must be one constant: otherwise the
    server does not count with this tokenizer, and no overhead is taken."""
    sizes = sorted({max(1, workload.isl // 2), workload.isl})
    texts = overhead_prompts(workload, sizes)
    local, server, errors = await probe_prompt_tokens(client, sizes, texts)
    info: dict[str, Any] = {
        "method": "tokenizer overhead",
        "probe_tokens": local,
        "server_prompt_tokens": server,
    }
    if not local:
        info.update(fitted=False, error=errors[0] if errors else "no probes")
        return LengthModel(), info
    overheads = {t - k for k, t in zip(local, server, strict=True)}
    if len(overheads) != 1:
        info.update(
            fitted=False,
            error=(
                f"the server counted {server} prompt tokens for prompts of {local} tokens "
                "of the tokenizer: not a constant overhead, so the tokenizer is not the "
                "server's; prompt lengths follow the tokenizer alone"
            ),
        )
        return LengthModel(), info
    overhead = overheads.pop()
    info.update(fitted=True, overhead=overhead)
    return LengthModel(1.0, float(overhead)), info
