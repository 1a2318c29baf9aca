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
  of them (round robin) followed by a unique suffix up to ``isl`` tokens.

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
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import WorkloadError

WorkloadKind = Literal["synthetic", "sharegpt", "jsonl", "shared_prefix"]
Distribution = Literal["fixed", "normal", "lognormal", "uniform"]

# Short, common English words: nearly all are one token, with their leading space, in
# the BPE vocabularies of current models, so a word count is a good first guess.
_WORDS = (
    "the of and to in is was for on are as with his they at be this from have or by one had "
    "not but what all were when we there can an your which their said if do will each about "
    "how up out them then she many some so these would other into has more her two like him "
    "see time could no make than first been its who now people my made over did down only "
    "way find use may water long little very after words called just where most know get "
    "through back much go good new write our me man too any day same right look think also "
    "around another came come work three word must because does part even place well such "
    "here take why things help put years different away again off went old number great "
    "tell men say small every found still between name should home big give air line set "
    "own under read last never us left end along while might next sound below saw something "
    "thought both few those always looked show large often together asked house world going "
    "want school important until form food keep children feet land side without boy once "
    "animals life enough took sometimes four head above kind began almost live page got earth "
    "need far hand high year mother light parts country father let night following picture "
    "being study second eyes soon times story boys since white days ever paper hard near "
    "sentence better best across during today others however sure means knew its try told "
    "young miles sun ways thing whole hear example heard several change answer room sea "
    "against top turned learn point city play toward five using himself usually"
).split()


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
    distribution: Distribution = "fixed"
    path: str | None = None
    num_prefixes: int = 0
    prefix_len: int = 0
    seed: int = 0
    tokenizer: str | None = None
    calibrate: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("synthetic", "sharegpt", "jsonl", "shared_prefix"):
            raise WorkloadError(
                f"{self.kind!r} is not a valid workload kind. "
                "Valid kinds: synthetic, sharegpt, jsonl, shared_prefix."
            )
        if self.distribution not in ("fixed", "normal", "lognormal", "uniform"):
            raise WorkloadError(
                f"{self.distribution!r} is not a valid distribution. "
                "Valid distributions: fixed, normal, lognormal, uniform."
            )
        if self.isl < 1 or self.osl < 1:
            raise WorkloadError(f"isl and osl must be >= 1, got {self.isl}, {self.osl}")
        if self.isl_stddev < 0 or self.osl_stddev < 0:
            raise WorkloadError("isl_stddev and osl_stddev must be >= 0")
        if self.kind in ("sharegpt", "jsonl") and not self.path:
            raise WorkloadError(f"workload kind {self.kind!r} needs a path")
        if self.kind == "shared_prefix":
            if self.num_prefixes < 1 or self.prefix_len < 1:
                raise WorkloadError("shared_prefix needs num_prefixes >= 1 and prefix_len >= 1")
            if self.prefix_len >= self.isl:
                raise WorkloadError(
                    f"shared_prefix needs prefix_len < isl, got {self.prefix_len} >= {self.isl}"
                )

    @property
    def needs_calibration(self) -> bool:
        return (
            self.calibrate
            and self.tokenizer is None
            and self.kind in ("synthetic", "shared_prefix")
        )

    @property
    def measures_overhead(self) -> bool:
        """With a tokenizer: probe the server for the tokens it adds around a prompt."""
        return (
            self.calibrate
            and self.tokenizer is not None
            and self.kind in ("synthetic", "shared_prefix")
        )

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


@dataclass(frozen=True, slots=True)
class LengthModel:
    """tokens ≈ tokens_per_word * words + overhead (fitted by calibration). With a
    tokenizer only ``overhead`` is used: the tokens the server adds around a prompt."""

    tokens_per_word: float = 1.0
    overhead: float = 0.0

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead) / self.tokens_per_word))

    def to_dict(self) -> dict[str, float]:
        return {"tokens_per_word": self.tokens_per_word, "overhead": self.overhead}


def fit_length_model(words: Sequence[int], tokens: Sequence[int]) -> LengthModel:
    """Least squares of reported tokens on word counts; with one size only, a ratio."""
    w = np.asarray(words, dtype=float)
    t = np.asarray(tokens, dtype=float)
    if len(w) == 0:
        return LengthModel()
    if len(set(w.tolist())) >= 2:
        slope, intercept = np.polyfit(w, t, 1)
        if slope > 0.05:
            return LengthModel(float(slope), float(intercept))
    return LengthModel(float(t.sum() / max(w.sum(), 1.0)), 0.0)


def draw_lengths(
    rng: np.random.Generator, mean: int, stddev: float, distribution: str, n: int
) -> np.ndarray:
    """n integer lengths >= 1 with the given mean and standard deviation."""
    if distribution == "fixed" or stddev == 0:
        return np.full(n, mean, dtype=np.int64)
    if distribution == "normal":
        x = rng.normal(mean, stddev, n)
    elif distribution == "lognormal":
        sigma2 = math.log1p((stddev / mean) ** 2)
        x = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
    elif distribution == "uniform":
        half = math.sqrt(3.0) * stddev
        x = rng.uniform(mean - half, mean + half, n)
    else:
        raise WorkloadError(f"unknown distribution {distribution!r}")
    return np.maximum(np.rint(x), 1).astype(np.int64)


class _Tokenizer:
    """A local ``tokenizers`` tokenizer (optional dependency)."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise WorkloadError(
                "a tokenizer path needs the 'tokenizers' package: pip install tokenizers"
            ) from exc
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise WorkloadError(f"tokenizer file not found: {p}")
        try:
            self._tok = Tokenizer.from_file(str(p))
        except Exception as exc:
            raise WorkloadError(f"cannot read tokenizer {p}: {exc}") from exc

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def exact(self, words: list[str], n: int, head: str = "") -> str:
        """A text of exactly n tokens, built from words and cut at a token boundary.

        With ``head`` the text is ``head`` followed by words and the n tokens are counted
        over the whole of it: a byte-level BPE tokenizes a word after a space (``" the"``)
        differently from the same word at the start of a text, so a prefix and a suffix
        made exact apart need not add up once joined."""
        text = head + " ".join(words)
        enc = self._tok.encode(text, add_special_tokens=False)
        if len(enc.ids) < n:
            raise WorkloadError(f"not enough words for {n} tokens")
        for cut in range(n, 0, -1):
            candidate = text[: enc.offsets[cut - 1][1]]
            if len(candidate) <= len(head):
                break
            got = self.count(candidate)
            if got == n:
                return candidate
            if got < n:
                # Merges across the cut changed the count; pad from the word list.
                extra = n - got
                for w in words:
                    trial = candidate + " " + w
                    if self.count(trial) <= n:
                        candidate = trial
                        extra -= 1
                    if self.count(candidate) == n or extra <= 0:
                        break
                if self.count(candidate) == n:
                    return candidate
        raise WorkloadError(f"cannot build a prompt of exactly {n} tokens")


def _words(rng: np.random.Generator, n: int) -> list[str]:
    idx = rng.integers(0, len(_WORDS), n)
    return [_WORDS[i] for i in idx]


def check_workload(spec: WorkloadSpec) -> int:
    """Read the workload's dataset (if any) as a run would and return its usable rows (0 for
    a synthetic kind). ``WorkloadError`` names the file, the line and what is wrong: called
    before any engine starts, so a bad file fails the session at once, not every test."""
    if spec.kind not in ("sharegpt", "jsonl"):
        return 0
    path = os.fspath(spec.path or "")
    if not os.path.isfile(path):
        what = "a directory" if os.path.isdir(path) else "not found"
        raise WorkloadError(f"dataset {path}: {what} (--dataset takes a .json or .jsonl file)")
    rows = _read_sharegpt(path, None) if spec.kind == "sharegpt" else _read_jsonl(path)
    return len(rows)


def _read_sharegpt(path: str, tok: _Tokenizer | None) -> list[tuple[str, int | None]]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"cannot read ShareGPT file {path}: {exc}") from exc
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: a ShareGPT file is a JSON list of conversations")
    out: list[tuple[str, int | None]] = []
    for conv in data:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            continue
        prompt = next(
            (t.get("value") for t in turns if isinstance(t, dict) and t.get("from") == "human"),
            None,
        )
        reply = next(
            (t.get("value") for t in turns if isinstance(t, dict) and t.get("from") == "gpt"),
            None,
        )
        if not isinstance(prompt, str) or not prompt.strip():
            continue
        osl = None
        if isinstance(reply, str) and reply.strip():
            osl = tok.count(reply) if tok else len(reply.split())
        out.append((prompt, max(osl, 1) if osl is not None else None))
    if not out:
        raise WorkloadError(f"{path}: no usable conversation (human turn) found")
    return out


def _read_jsonl(path: str) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    raise WorkloadError(f"{path}:{lineno}: not JSON: {exc}") from exc
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
    except OSError as exc:
        raise WorkloadError(f"cannot read JSONL file {path}: {exc}") from exc
    if not out:
        raise WorkloadError(f"{path}: no prompts")
    return out


# Streams of the seeded generators apart from the per-request ones (which use the index).
_PREFIX_STREAM = 1 << 40
_ORDER_STREAM = (1 << 40) + 1


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
        self._tok = _Tokenizer(spec.tokenizer) if spec.tokenizer else None
        self._rows: list[tuple[str, int | None]] = []
        self._order: np.ndarray | None = None
        self._prefixes: list[str] = []
        if spec.kind in ("sharegpt", "jsonl"):
            path = os.fspath(spec.path or "")
            self._rows = (
                _read_sharegpt(path, self._tok) if spec.kind == "sharegpt" else _read_jsonl(path)
            )
            self._order = np.random.default_rng([spec.seed, _ORDER_STREAM]).permutation(
                len(self._rows)
            )
        elif spec.kind == "shared_prefix":
            rng = np.random.default_rng([spec.seed, _PREFIX_STREAM])
            overhead = round(self.lm.overhead) if self._tok else 0
            prefix_tokens = max(1, spec.prefix_len - overhead)
            for _ in range(spec.num_prefixes):
                if self._tok:
                    words = _words(rng, prefix_tokens * 2 + 8)
                    self._prefixes.append(self._tok.exact(words, prefix_tokens))
                else:
                    self._prefixes.append(" ".join(_words(rng, self.lm.words_for(spec.prefix_len))))

    def prompt(self, i: int) -> Prompt:
        """Prompt ``i`` (``i >= 0``)."""
        spec = self.spec
        tok = self._tok
        lm = self.lm
        rng = np.random.default_rng([spec.seed, i])
        osl = int(draw_lengths(rng, spec.osl, spec.osl_stddev, spec.distribution, 1)[0])
        if self._order is not None:
            text, row_osl = self._rows[int(self._order[i % len(self._rows)])]
            isl = tok.count(text) if tok else len(text.split())
            return Prompt(text, isl, row_osl if row_osl is not None else osl)
        isl = int(draw_lengths(rng, spec.isl, spec.isl_stddev, spec.distribution, 1)[0])
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
                words = _words(rng, (total - prefix_tokens) * 2 + 8)
                text = tok.exact(words, total, head=prefix + " ")
            else:
                text = tok.exact(_words(rng, body_len * 2 + 8), max(1, isl - overhead))
        else:
            # The overhead (chat template, BOS) belongs to the whole prompt, not the suffix.
            words_n = (
                max(1, round(body_len / lm.tokens_per_word)) if prefix else lm.words_for(body_len)
            )
            text = " ".join(_words(rng, words_n))
            if prefix:
                text = f"{prefix} {text}"
        return Prompt(text, isl, osl)


def build_prompts(
    spec: WorkloadSpec, n: int, length_model: LengthModel | None = None
) -> list[Prompt]:
    """The first n prompts of the workload (``PromptSource``)."""
    if n < 0:
        raise WorkloadError("n must be >= 0")
    source = PromptSource(spec, length_model)
    return [source.prompt(i) for i in range(n)]


def calibration_prompts(spec: WorkloadSpec, sizes: Sequence[int]) -> list[str]:
    """Probe prompts of the given word counts (seeded apart from the workload)."""
    rng = np.random.default_rng(spec.seed + 7919)
    return [" ".join(_words(rng, max(1, s))) for s in sizes]


def overhead_prompts(spec: WorkloadSpec, sizes: Sequence[int]) -> list[str]:
    """Probe prompts of exactly the given token counts in the spec's tokenizer (seeded
    apart from the workload), to measure what the server adds around a prompt."""
    if spec.tokenizer is None:
        raise WorkloadError("overhead probes need a tokenizer")
    tok = _Tokenizer(spec.tokenizer)
    rng = np.random.default_rng(spec.seed + 7919)
    return [tok.exact(_words(rng, max(1, s) * 2 + 8), max(1, s)) for s in sizes]
