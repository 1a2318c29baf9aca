"""Dataset files read as prompts: ShareGPT conversations (each human turn with the length
of the reply that follows it) and JSONL prompts (with their requested output length)."""

from __future__ import annotations

import json

from ..errors import WorkloadError
from .promptlengths import Tokenizer
from .traces import json_lines

__all__ = ["read_conversations", "read_jsonl"]


def read_conversations(
    path: str, tok: Tokenizer | None, max_turns: int
) -> list[list[tuple[str, int | None]]]:
    """Each conversation's human turns (up to ``max_turns``), each with the length of the
    ``gpt`` reply that follows it (None: none follows)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"cannot read ShareGPT file {path}: {exc}") from exc
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: a ShareGPT file is a JSON list of conversations")
    out: list[list[tuple[str, int | None]]] = []
    for conv in data:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            continue
        kept: list[tuple[str, int | None]] = []
        for j, t in enumerate(turns):
            if len(kept) >= max_turns:
                break
            if not isinstance(t, dict) or t.get("from") != "human":
                continue
            prompt = t.get("value")
            if not isinstance(prompt, str) or not prompt.strip():
                break  # a conversation is kept up to its first empty turn
            nxt = turns[j + 1] if j + 1 < len(turns) else None
            reply = nxt.get("value") if isinstance(nxt, dict) and nxt.get("from") == "gpt" else None
            osl = None
            if isinstance(reply, str) and reply.strip():
                osl = max(tok.count(reply) if tok else len(reply.split()), 1)
            kept.append((prompt, osl))
        if kept:
            out.append(kept)
    if not out:
        raise WorkloadError(f"{path}: no usable conversation (human turn) found")
    return out


def read_jsonl(path: str) -> list[tuple[str, int | None]]:
    """Each line's prompt (an object's ``prompt`` or ``text``, or a bare string) and its
    ``output_tokens`` / ``max_tokens`` (None: not given)."""
    out: list[tuple[str, int | None]] = []
    for lineno, obj in json_lines(path, "JSONL file"):
        if isinstance(obj, str):
            out.append((obj, None))
            continue
        if not isinstance(obj, dict):
            raise WorkloadError(f"{path}:{lineno}: expected an object or a string")
        text = obj.get("prompt", obj.get("text"))
        if not isinstance(text, str):
            raise WorkloadError(f"{path}:{lineno}: no 'prompt' string")
        osl = obj.get("output_tokens", obj.get("max_tokens"))
        out.append((text, int(osl) if isinstance(osl, int) and osl > 0 else None))
    if not out:
        raise WorkloadError(f"{path}: no prompts")
    return out
