"""The sim engine's stand-in for a tokenizer: prompt token counts, prefix-block hashes and
output words.

The sim has no vocabulary. It counts a prompt's tokens with one deterministic rule, so a
load generator can calibrate prompt lengths against the ``usage.prompt_tokens`` it reports:

- every run of word characters (``\\w+``) is one token, and so is every other
  non-space character (punctuation, symbols);
- a completion prompt gets one more token (the begin-of-text token);
- a chat request gets 1 (begin-of-text) + 5 per message (role header and end-of-turn
  markers, as in the Llama 3 chat template) + 4 (the assistant header the generation
  prompt adds), plus the tokens of each message's text.

Real BPE tokenizers give about 1.3 tokens per English word; this rule gives 1 per word and
1 per punctuation mark, which is close for the synthetic prompts load generators build
and, above all, stable.

Output is one word per token (" the", " model", ...), so a client that counts one token per
content chunk counts what ``usage.completion_tokens`` says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

# Plausible English words for the generated text; cycled with a per-request offset.
_WORDS = (
    "the model serves tokens as fast as the batch allows and every request waits its turn "
    "in the queue while the scheduler packs prefill chunks next to decode steps so that the "
    "memory bandwidth of each device is spent on weights and cache reads rather than idle "
    "cycles then latency grows with load until the objective breaks at the knee of the curve "
    "where throughput stops rising and queueing starts to dominate what users see in practice "
    "an engine with prefix caching skips work for shared prompts and answers sooner"
).split()
_WORD_PIECES: tuple[str, ...] = tuple(" " + w for w in _WORDS)
# The same words as JSON string literals (bytes), for the streaming hot path.
_PIECES_JSON: tuple[bytes, ...] = tuple(json.dumps(p).encode() for p in _WORD_PIECES)
_FIRST_JSON: tuple[bytes, ...] = tuple(json.dumps(p[1:]).encode() for p in _WORD_PIECES)


def split_text(text: str) -> list[str]:
    """The approximate tokens of ``text`` (see the module docstring for the rule)."""
    return _TOKEN_RE.findall(text)


def _message_text(content: Any) -> str:
    """The text of a chat message's ``content``: a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    return ""


def chat_tokens(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The approximate token sequence of a chat request, template markers included."""
    out: list[str] = ["<|begin_of_text|>"]
    for msg in messages:
        role = str(msg.get("role", "user"))
        out.extend(("<|start_header_id|>", role, "<|end_header_id|>", "\n\n"))
        out.extend(split_text(_message_text(msg.get("content"))))
        out.append("<|eot_id|>")
    out.extend(("<|start_header_id|>", "assistant", "<|end_header_id|>", "\n\n"))
    return out


def completion_tokens(prompt: str | Sequence[Any]) -> list[str]:
    """The approximate token sequence of a completion prompt (a string, or token ids)."""
    if isinstance(prompt, str):
        return ["<|begin_of_text|>", *split_text(prompt)]
    # A list of token ids (or a batch of one prompt): each id is one token.
    return ["<|begin_of_text|>", *(str(t) for t in prompt)]


def block_hashes(tokens: Sequence[str], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full ``block_size`` blocks of ``tokens``: block ``i``'s hash
    covers every token before its end, so equal hashes mean equal prefixes."""
    out: list[int] = []
    prev = 0
    for i in range(len(tokens) // block_size):
        prev = hash((prev, tuple(tokens[i * block_size : (i + 1) * block_size])))
        out.append(prev)
    return tuple(out)


def output_piece(seed: int, index: int) -> str:
    """Output word ``index`` of a request (the first one without a leading space)."""
    piece = _WORD_PIECES[(seed + index) % len(_WORD_PIECES)]
    return piece[1:] if index == 0 else piece


def output_piece_json(seed: int, index: int) -> bytes:
    """``output_piece`` as a JSON string literal, ready to splice into a chunk."""
    table = _FIRST_JSON if index == 0 else _PIECES_JSON
    return table[(seed + index) % len(table)]
