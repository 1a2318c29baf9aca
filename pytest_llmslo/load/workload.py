"""What is sent: prompts with their requested input and output lengths.

Kinds (``WorkloadSpec.kind``):

- ``synthetic``: random words, ISL/OSL fixed or drawn from a distribution (``normal``,
  ``lognormal``, ``uniform`` with the given mean and standard deviation; lengths >= 1);
- ``sharegpt``: a ShareGPT-format JSON file (a list of ``{"conversations": [{"from":
  "human", "value": ...}, {"from": "gpt", "value": ...}]}``); the first human turn is the
  prompt, the first reply's length is the OSL;
- ``jsonl``: one JSON object per line with ``prompt`` (or ``text``) and optionally
  ``output_tokens`` / ``max_tokens`` (else ``osl``), or a bare JSON string per line;
- ``shared_prefix``: ``num_prefixes`` prefixes of ``prefix_len`` tokens, each request one
  of them (round robin) followed by a unique suffix up to ``isl`` tokens;
- ``trace``: a timestamped trace (``traces.py``: Mooncake, Azure, BurstGPT, JSONL) in the
  window ``trace_start_s`` + ``trace_window_s``; request i is the trace's row i, with its
  lengths. A row with ``hash_ids`` is built block by block: each id is ``block_tokens``
  tokens of text seeded by the id alone (the last block cut to the row's length), so rows
  whose ids start alike share a real prefix, as in the trace's source. A trace level
  (``LoadLevel.trace``) replays the rows at their timestamps; any other level sends them
  in order as a dataset.

Multi-turn (``turns > 1``): the unit of load is a conversation (``Conversation``) of up to
``turns`` turns. Each turn's prompt is the whole history (the earlier user messages and the
replies that were really streamed; with ``history_turns`` only the last so many turns)
followed by a new user message. Synthetic and shared-prefix conversations have ``turns``
turns of ``isl``-token messages (the shared prefix opens the first) and ``osl``-token
replies; a ShareGPT conversation keeps its human turns (up to ``turns``), each reply's
length its ``gpt`` answer's. Between turns the user thinks for ``think_time_s``: ``fixed``,
or drawn (``exponential``, ``uniform`` over [0, 2 x mean]) from a generator seeded by the
conversation.

Token lengths: with ``tokenizer`` (a local ``tokenizer.json`` or a folder holding one,
read with the optional ``tokenizers`` package) synthetic and shared-prefix prompts are
exact in that tokenizer: the whole text, shared prefix and the space joining it to the
suffix included, is ``isl - overhead`` tokens. ``overhead`` is what the server adds around
a prompt (the chat template's role headers and end-of-turn markers, a begin-of-text
token); with ``calibrate`` the runner measures it before the run by sending probe prompts
of known token counts and reading the server's ``prompt_tokens`` (it must be the same
constant for every probe, else the tokenizer is not the server's and none is taken), so
the server sees exactly ``isl`` prompt tokens. Without a tokenizer, a prompt of n words is
assumed to be ``tokens_per_word * n + overhead`` tokens; ``calibrate`` fits those two
numbers to the server's reported ``prompt_tokens`` for a few probe prompts before the run
(``runner.py``), so lengths land close to the requested ones on any tokenizer.
Everything is seeded: the same spec gives the same prompts. Prompts are built lazily, one
index at a time (``PromptSource``): prompt i depends on the seed and i alone.

Salt (``salt``): the same seed gives the same prompts in every session, so a second session
against an engine that stayed up would find its prompts in the engine's prefix cache (a
97 % hit rate and a third of the TTFT, measured on the sim). A salt changes the *words* of
built prompts (synthetic and shared-prefix prompts, conversation turns, trace blocks and
tails), never their lengths: the lengths are drawn from the unsalted generator, and a salted
prompt has as many words (with a tokenizer, exactly as many tokens) as the unsalted one.
Shared prefixes and trace blocks take the salt too, so they are still shared within a
session and no longer across sessions with other salts. Dataset prompts are the dataset's
text and take no salt. An empty salt gives the prompts of the seed alone.

Eval items (``eval_task``): a share of the requests carry an eval item (``evals``) in place
of their prompt, chosen by the seed and the index; ``answer_book`` scores their answers.
"""

from __future__ import annotations

import hashlib
import math
import os
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ..choices import (
    DISTRIBUTIONS,
    THINK_DISTRIBUTIONS,
    WORKLOAD_KINDS,
    LengthDistribution,
    ThinkDistribution,
    WorkloadKind,
)
from ..errors import WorkloadError
from ..evals import AnswerBook, EvalSource, EvalTask, HfReading, eval_problem, is_eval_index
from .datasets import read_conversations, read_jsonl
from .promptlengths import LengthModel, Tokenizer, draw_lengths, random_words
from .traces import Trace, read_trace

#: Kinds whose prompts are built here from words (so a calibration can fit them).
_BUILT_KINDS = ("synthetic", "shared_prefix", "trace")


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A reproducible workload (see the module docstring for each kind).

    ``isl``/``osl`` are token counts (mean when a distribution is given).
    ``calibrate`` lets the runner fit words-per-token to the server when no tokenizer is
    given, or measure the tokens the server adds around a prompt (chat template, BOS)
    when one is (synthetic and shared-prefix kinds only).
    """

    kind: WorkloadKind = "synthetic"
    isl: int = 512
    osl: int = 256
    isl_stddev: float = 0.0
    osl_stddev: float = 0.0
    distribution: LengthDistribution = "fixed"
    path: str | None = None
    num_prefixes: int = 0
    prefix_len: int = 0
    seed: int = 0
    tokenizer: str | None = None
    calibrate: bool = True
    trace_format: str = "auto"
    block_tokens: int = 512
    trace_start_s: float = 0.0
    trace_window_s: float | None = None
    turns: int = 1
    think_time_s: float = 0.0
    think_distribution: ThinkDistribution = "fixed"
    history_turns: int = 0
    salt: str = ""
    #: Eval items inside the traffic (``evals``): the task (None for none) and the share of
    #: the requests that carry one (1: every request).
    eval_task: EvalTask | None = None
    eval_share: float = 1.0
    eval_path: str | None = None
    #: The ``module:function`` that scores the eval file's ``custom`` rows
    #: (``evals.custom``).
    eval_scorer: str | None = None
    #: How the ``hf`` eval reads the dataset ``eval_path`` names (``evals.hfreading``).
    eval_hf: HfReading | None = None

    def __post_init__(self) -> None:
        bad = eval_problem(self.eval_task, self.eval_share, self.eval_path, self.kind, self.turns)
        if bad:
            raise WorkloadError(bad)
        if self.kind not in WORKLOAD_KINDS:
            raise WorkloadError(
                f"{self.kind!r} is not a valid workload kind. "
                f"Valid kinds: {', '.join(WORKLOAD_KINDS)}."
            )
        if self.turns < 1:
            raise WorkloadError(f"turns must be >= 1, got {self.turns}")
        if self.turns > 1 and self.kind not in ("synthetic", "shared_prefix", "sharegpt"):
            raise WorkloadError(
                f"multi-turn conversations (turns={self.turns}) are built from synthetic, "
                f"shared-prefix or ShareGPT workloads, not {self.kind!r}"
            )
        if not (self.think_time_s >= 0 and math.isfinite(self.think_time_s)):
            raise WorkloadError(f"think time must be >= 0 s, got {self.think_time_s!r}")
        if self.think_distribution not in THINK_DISTRIBUTIONS:
            raise WorkloadError(
                f"{self.think_distribution!r} is not a think-time distribution. "
                f"Valid: {', '.join(THINK_DISTRIBUTIONS)}."
            )
        if self.history_turns < 0:
            raise WorkloadError(f"history_turns must be >= 0 (0: all), got {self.history_turns}")
        if self.block_tokens < 1:
            raise WorkloadError(f"block_tokens must be >= 1, got {self.block_tokens}")
        if self.distribution not in DISTRIBUTIONS:
            raise WorkloadError(
                f"{self.distribution!r} is not a valid distribution. "
                f"Valid distributions: {', '.join(DISTRIBUTIONS)}."
            )
        if self.isl < 1 or self.osl < 1:
            raise WorkloadError(f"isl and osl must be >= 1, got {self.isl}, {self.osl}")
        if self.isl_stddev < 0 or self.osl_stddev < 0:
            raise WorkloadError("isl_stddev and osl_stddev must be >= 0")
        if self.kind in ("sharegpt", "jsonl", "trace") and not self.path:
            raise WorkloadError(f"workload kind {self.kind!r} needs a path")
        if self.kind == "shared_prefix":
            if self.num_prefixes < 1 or self.prefix_len < 1:
                raise WorkloadError("shared_prefix needs num_prefixes >= 1 and prefix_len >= 1")
            if self.prefix_len >= self.isl:
                raise WorkloadError(
                    f"shared_prefix needs prefix_len < isl, got {self.prefix_len} >= {self.isl}"
                )

    def answer_book(self) -> AnswerBook | None:
        """Where a level's eval answers are scored (None: the workload has no eval)."""
        if self.eval_task is None:
            return None
        asked = (self.eval_task, self.seed, self.eval_share, self.isl, self.eval_path)
        return AnswerBook(*asked, self.eval_scorer, self.eval_hf)

    @property
    def needs_calibration(self) -> bool:
        return self.calibrate and self.tokenizer is None and self.kind in _BUILT_KINDS

    @property
    def measures_overhead(self) -> bool:
        """With a tokenizer: probe the server for the tokens it adds around a prompt."""
        return self.calibrate and self.tokenizer is not None and self.kind in _BUILT_KINDS

    @property
    def multi_turn(self) -> bool:
        return self.turns > 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def for_level(self, mode: str, value: float) -> WorkloadSpec:
        """The same workload with prompts of its own for one load level.

        The levels of a sweep must not share prompts: an engine with a prefix cache
        (vLLM's default, SGLang's radix cache, the sim) would serve a later level from what
        an earlier one left in its cache and report a TTFT that no new prompt gets. The seed
        is derived from the base seed and the level alone, so the same level draws the same
        prompts in every session (a baseline and a later run stay comparable).
        """
        key = f"{self.seed}:{mode}:{float(value)!r}".encode()
        return replace(self, seed=zlib.crc32(key))


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's prompt text and the lengths it asks for."""

    text: str
    isl: int
    osl: int
    #: Earlier turns sent before ``text`` (an eval file's chat row), as (user, assistant)
    #: pairs, and a system message.
    history: tuple[tuple[str, str], ...] = ()
    system: str | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    """One multi-turn conversation: each turn's new user message (``Prompt``: its text,
    its own tokens, the reply's requested length) and the think time before each turn
    (0 before the first)."""

    index: int
    turns: tuple[Prompt, ...]
    think_s: tuple[float, ...]


def check_workload(spec: WorkloadSpec) -> int:
    """Read the workload's dataset (if any) as a run would and return its usable rows (0 for
    a synthetic kind). ``WorkloadError`` names the file, the line and what is wrong: called
    before any engine starts, so a bad file fails the session at once, not every test.
    A tokenizer that cannot be read is a ``WorkloadError`` too."""
    if spec.tokenizer:
        Tokenizer(spec.tokenizer)
    if spec.kind == "trace":
        return len(_read_trace(spec))
    if spec.kind not in ("sharegpt", "jsonl"):
        return 0
    path = os.fspath(spec.path or "")
    if not os.path.isfile(path):
        what = "a directory" if os.path.isdir(path) else "not found"
        raise WorkloadError(f"dataset {path}: {what} (--dataset takes a .json or .jsonl file)")
    if spec.kind == "sharegpt":
        return len(read_conversations(path, None, spec.turns))
    return len(read_jsonl(path))


def _read_trace(spec: WorkloadSpec) -> Trace:
    return read_trace(
        os.fspath(spec.path or ""),
        spec.trace_format,
        start_s=spec.trace_start_s,
        window_s=spec.trace_window_s,
    )


# Streams of the seeded generators apart from the per-request ones (which use the index).
_PREFIX_STREAM = 1 << 40
_ORDER_STREAM = (1 << 40) + 1
_BLOCK_STREAM = (1 << 40) + 2
_TURN_STREAM = (1 << 40) + 3
_SALT_STREAM = (1 << 40) + 4
#: Trace blocks kept built (shared blocks are built once while they recur).
_BLOCK_CACHE = 512


def _salt_key(salt: str) -> int | None:
    """A 64-bit number for ``salt`` (None for no salt), to seed the words' generators."""
    if not salt:
        return None
    return int.from_bytes(hashlib.blake2b(salt.encode(), digest_size=8).digest(), "little")


class PromptSource:
    """The workload's prompts by index, built on demand.

    Prompt ``i`` comes from a generator seeded with ``(seed, i)`` alone, so it is the same
    whichever process builds it, in whatever order, and however many come before it: a
    worker builds the prompts of its own indices, a level bounded by time alone needs no
    request count, and nothing is built that is not sent. Datasets are read once and taken
    in a seeded order, cycled when shorter than the run; shared prefixes are built once.
    """

    def __init__(self, spec: WorkloadSpec, length_model: LengthModel | None = None) -> None:
        self.spec = spec
        self.lm = length_model or LengthModel()
        self._tok = Tokenizer(spec.tokenizer) if spec.tokenizer else None
        self._rows: list[tuple[str, int | None]] = []
        self._convs: list[list[tuple[str, int | None]]] = []
        self._order: np.ndarray | None = None
        self._prefixes: list[str] = []
        self.trace: Trace | None = None
        self._blocks: OrderedDict[int, str] = OrderedDict()
        self._salt = _salt_key(spec.salt)
        self._evals = (
            None
            if spec.eval_task is None
            else EvalSource(
                spec.eval_task,
                spec.seed,
                spec.isl,
                spec.eval_path,
                spec.eval_share,
                spec.eval_scorer,
                spec.eval_hf,
            )
        )
        if spec.kind in ("sharegpt", "jsonl"):
            path = os.fspath(spec.path or "")
            if spec.kind == "sharegpt":
                self._convs = read_conversations(path, self._tok, spec.turns)
                self._rows = [c[0] for c in self._convs]
            else:
                self._rows = read_jsonl(path)
            self._order = np.random.default_rng([spec.seed, _ORDER_STREAM]).permutation(
                len(self._rows)
            )
        elif spec.kind == "trace":
            self.trace = _read_trace(spec)
        elif spec.kind == "shared_prefix":
            rng = np.random.default_rng(self._salted([spec.seed, _PREFIX_STREAM]))
            overhead = round(self.lm.overhead) if self._tok else 0
            prefix_tokens = max(1, spec.prefix_len - overhead)
            for _ in range(spec.num_prefixes):
                if self._tok:
                    words = random_words(rng, prefix_tokens * 2 + 8)
                    self._prefixes.append(self._tok.exact(words, prefix_tokens))
                else:
                    self._prefixes.append(
                        " ".join(random_words(rng, self.lm.words_for(spec.prefix_len)))
                    )

    def _salted(self, key: list[int]) -> list[int]:
        """The seed of a generator of words: ``key``, with the salt when there is one."""
        return key if self._salt is None else [*key, _SALT_STREAM, self._salt]

    def _word_rng(self, i: int, rng: np.random.Generator) -> np.random.Generator:
        """The generator of prompt ``i``'s words: ``rng`` (which drew its lengths) without a
        salt, so the prompts of an unsalted spec stay what they were; its own with one."""
        if self._salt is None:
            return rng
        return np.random.default_rng(self._salted([self.spec.seed, i]))

    def _block(self, h: int) -> str:
        """The text of trace block ``h``: ``block_tokens`` tokens seeded by the id alone
        (and the salt)."""
        text = self._blocks.get(h)
        if text is not None:
            self._blocks.move_to_end(h)
            return text
        key = [self.spec.seed, _BLOCK_STREAM, h & ((1 << 62) - 1)]
        rng = np.random.default_rng(self._salted(key))
        n = self.spec.block_tokens
        if self._tok:
            text = self._tok.exact(random_words(rng, n * 2 + 8), n)
        else:
            text = " ".join(random_words(rng, max(1, round(n / self.lm.tokens_per_word))))
        self._blocks[h] = text
        if len(self._blocks) > _BLOCK_CACHE:
            self._blocks.popitem(last=False)
        return text

    def _trace_prompt(self, i: int) -> Prompt:
        trace = self.trace
        assert trace is not None
        row = i % len(trace)
        isl = int(trace.isl[row])
        osl_row = int(trace.osl[row])
        osl = osl_row if osl_row > 0 else self.spec.osl
        given = trace.prompt(row)
        if given is not None:
            return Prompt(given, isl, osl)
        rng = np.random.default_rng(self._salted([self.spec.seed, i]))
        tok = self._tok
        lm = self.lm
        overhead = max(0, round(lm.overhead))
        hashes = trace.hashes(row)
        n_block = self.spec.block_tokens
        # Whole blocks for every id but the last, which is cut to the row's length; the
        # overhead (chat template) comes off the unique tail.
        parts: list[str] = []
        used = 0
        for j, h in enumerate(hashes):
            left = isl - used
            if left <= 0:
                break
            block = self._block(int(h))
            if j == len(hashes) - 1 and left < n_block:
                keep = max(1, left - overhead)
                words = block.split(" ")
                take = max(1, round(keep / lm.tokens_per_word)) if not tok else keep
                if tok:
                    block = tok.exact(words, min(take, n_block))
                else:
                    block = " ".join(words[:take])
                used += left
            else:
                used += n_block
            parts.append(block)
        tail = isl - used
        if tail > 0:
            keep = max(1, tail - overhead)
            if tok:
                parts.append(tok.exact(random_words(rng, keep * 2 + 8), keep))
            else:
                parts.append(" ".join(random_words(rng, max(1, round(keep / lm.tokens_per_word)))))
        return Prompt(" ".join(parts), isl, osl)

    def prompt(self, i: int) -> Prompt:
        """Prompt ``i`` (``i >= 0``)."""
        spec = self.spec
        if self.trace is not None:
            return self._trace_prompt(i)
        if self._evals is not None and is_eval_index(spec.seed, i, spec.eval_share):
            item = self._evals.item(i)
            return Prompt(item.prompt, item.words, item.max_tokens, item.history, item.system)
        tok = self._tok
        lm = self.lm
        rng = np.random.default_rng([spec.seed, i])
        osl = int(draw_lengths(rng, spec.osl, spec.osl_stddev, spec.distribution, 1)[0])
        if self._order is not None:
            text, row_osl = self._rows[int(self._order[i % len(self._rows)])]
            isl = tok.count(text) if tok else len(text.split())
            return Prompt(text, isl, row_osl if row_osl is not None else osl)
        isl = int(draw_lengths(rng, spec.isl, spec.isl_stddev, spec.distribution, 1)[0])
        rng = self._word_rng(i, rng)
        # With a tokenizer: the tokens the server adds around the text (chat template, BOS),
        # measured by the runner; the text itself is that much shorter. Like the fitted
        # overhead of the word model, it comes off the prefix first.
        overhead = round(lm.overhead) if tok else 0
        prefix = ""
        body_len = isl
        if self._prefixes:
            prefix = self._prefixes[i % len(self._prefixes)]
            body_len = max(isl - spec.prefix_len, 1)
            isl = spec.prefix_len + body_len
        if tok:
            # Over-generate words and cut at a token boundary, counting over the whole
            # text: the space joining prefix and suffix changes how the suffix's first
            # word is tokenized.
            if prefix:
                prefix_tokens = max(1, spec.prefix_len - overhead)
                total = max(prefix_tokens + 1, isl - overhead)
                words = random_words(rng, (total - prefix_tokens) * 2 + 8)
                text = tok.exact(words, total, head=prefix + " ")
            else:
                text = tok.exact(random_words(rng, body_len * 2 + 8), max(1, isl - overhead))
        else:
            # The overhead (chat template, BOS) belongs to the whole prompt, not the suffix.
            words_n = (
                max(1, round(body_len / lm.tokens_per_word)) if prefix else lm.words_for(body_len)
            )
            text = " ".join(random_words(rng, words_n))
            if prefix:
                text = f"{prefix} {text}"
        return Prompt(text, isl, osl)

    def conversation(self, s: int) -> Conversation:
        """Conversation ``s`` (``s >= 0``) of a multi-turn workload: its user messages
        (turn 0 is prompt ``s`` of the single-turn workload, shared prefix included) and
        think times, seeded by ``s`` alone."""
        spec = self.spec
        rng = np.random.default_rng([spec.seed, _TURN_STREAM, s])
        if self._convs:
            assert self._order is not None
            conv = self._convs[int(self._order[s % len(self._convs)])]
            tok = self._tok
            turns = []
            for text, row_osl in conv:
                osl = int(draw_lengths(rng, spec.osl, spec.osl_stddev, spec.distribution, 1)[0])
                isl = tok.count(text) if tok else len(text.split())
                turns.append(Prompt(text, isl, row_osl if row_osl is not None else osl))
        else:
            # Turn 0 is the single-turn workload's prompt s (with its shared prefix); later
            # turns are new messages of their own indices, without the prefix.
            first = self.prompt(s)
            turns = [first]
            plain = replace(spec, kind="synthetic", num_prefixes=0, prefix_len=0, turns=1)
            src = PromptSource(plain, self.lm) if self._prefixes else self
            for k in range(1, spec.turns):
                turns.append(src.prompt(_TURN_STREAM + s * 1024 + k))
        think = [0.0]
        for _ in range(1, len(turns)):
            think.append(_think(rng, spec.think_time_s, spec.think_distribution))
        return Conversation(s, tuple(turns), tuple(think))


def _think(rng: np.random.Generator, mean: float, dist: str) -> float:
    if mean <= 0 or dist == "fixed":
        return mean
    if dist == "exponential":
        return float(rng.exponential(mean))
    return float(rng.uniform(0.0, 2.0 * mean))


def build_prompts(
    spec: WorkloadSpec, n: int, length_model: LengthModel | None = None
) -> list[Prompt]:
    """The first n prompts of the workload (``PromptSource``)."""
    if n < 0:
        raise WorkloadError("n must be >= 0")
    source = PromptSource(spec, length_model)
    return [source.prompt(i) for i in range(n)]


def _probe_rng(spec: WorkloadSpec) -> np.random.Generator:
    """The generator of calibration probes: seeded apart from the workload, salted with it
    (a probe left in a prefix cache by an earlier session would be a hit in this one)."""
    key = _salt_key(spec.salt)
    return np.random.default_rng(spec.seed + 7919 if key is None else [spec.seed + 7919, key])


def calibration_prompts(spec: WorkloadSpec, sizes: Sequence[int]) -> list[str]:
    """Probe prompts of the given word counts (seeded apart from the workload)."""
    rng = _probe_rng(spec)
    return [" ".join(random_words(rng, max(1, s))) for s in sizes]


def overhead_prompts(spec: WorkloadSpec, sizes: Sequence[int]) -> list[str]:
    """Probe prompts of exactly the given token counts in the spec's tokenizer (seeded
    apart from the workload), to measure what the server adds around a prompt."""
    if spec.tokenizer is None:
        raise WorkloadError("overhead probes need a tokenizer")
    tok = Tokenizer(spec.tokenizer)
    rng = _probe_rng(spec)
    return [tok.exact(random_words(rng, max(1, s) * 2 + 8), max(1, s)) for s in sizes]
