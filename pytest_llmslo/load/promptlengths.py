"""Token counts of prompt text: the words built prompts are made of, the fitted
words-to-tokens model, a local tokenizer that makes a text exactly n tokens long, and
lengths drawn from a distribution."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import WorkloadError

__all__ = ["WORDS", "LengthModel", "Tokenizer", "draw_lengths", "fit_length_model", "random_words"]

# Short, common English words: nearly all are one token, with their leading space, in
# the BPE vocabularies of current models, so a word count is a good first guess.
WORDS = (
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


class Tokenizer:
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


def random_words(rng: np.random.Generator, n: int) -> list[str]:
    """n words drawn from ``WORDS``."""
    idx = rng.integers(0, len(WORDS), n)
    return [WORDS[i] for i in idx]
