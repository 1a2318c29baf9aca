"""Workloads: lengths and distributions, datasets, shared prefixes, tokenizer exactness,
calibration, and the arrival schedules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytest_llmslo.errors import WorkloadError
from pytest_llmslo.load import LengthModel, WorkloadSpec, build_prompts, fit_length_model
from pytest_llmslo.load.client import ClientSettings, request_body
from pytest_llmslo.load.promptlengths import WORDS, draw_lengths
from pytest_llmslo.load.schedule import (
    arrival_offsets_ns,
    split_concurrency,
    split_round_robin,
)
from pytest_llmslo.records import LoadLevel


def test_synthetic_fixed_lengths_and_reproducible() -> None:
    spec = WorkloadSpec(isl=50, osl=7, seed=1)
    a = build_prompts(spec, 5)
    assert a == build_prompts(spec, 5)
    assert a != build_prompts(WorkloadSpec(isl=50, osl=7, seed=2), 5)
    assert all(len(p.text.split()) == 50 and p.isl == 50 and p.osl == 7 for p in a)
    assert len({p.text for p in a}) == 5  # distinct prompts: no accidental prefix caching


def test_each_load_level_draws_its_own_prompts() -> None:
    base = WorkloadSpec(kind="shared_prefix", isl=60, osl=7, num_prefixes=2, prefix_len=20)
    c8, c16 = base.for_level("concurrency", 8), base.for_level("concurrency", 16)
    # Same level, same prompts, in any session: baselines stay comparable.
    assert c8 == base.for_level("concurrency", 8.0)
    assert c8.seed != c16.seed != base.seed
    assert c8.for_level("rate", 8).seed != c8.seed
    a, b = build_prompts(c8, 20), build_prompts(c16, 20)
    # No prompt (nor shared prefix) of one level reappears at another: a prefix cache left
    # warm by c8 must not make c16's TTFT look better than new prompts would get.
    assert not {p.text for p in a} & {p.text for p in b}
    assert not {p.text[:60] for p in a} & {p.text[:60] for p in b}
    assert (c8.isl, c8.osl, c8.prefix_len) == (base.isl, base.osl, base.prefix_len)


def test_length_model_scales_word_counts() -> None:
    lm = LengthModel(tokens_per_word=1.25, overhead=10)
    p = build_prompts(WorkloadSpec(isl=110, osl=4), 1, lm)[0]
    assert len(p.text.split()) == 80 and p.isl == 110


@pytest.mark.parametrize("dist", ["normal", "lognormal", "uniform"])
def test_distributions_match_mean_and_stddev(dist: str) -> None:
    x = draw_lengths(np.random.default_rng(0), 500, 100, dist, 20000)
    assert x.min() >= 1
    assert abs(x.mean() - 500) < 10 and abs(x.std() - 100) < 10


def test_distributed_isl_osl_in_prompts() -> None:
    spec = WorkloadSpec(isl=40, osl=30, isl_stddev=10, osl_stddev=5, distribution="normal")
    ps = build_prompts(spec, 400)
    isl = np.array([p.isl for p in ps])
    osl = np.array([p.osl for p in ps])
    assert 37 < isl.mean() < 43 and 7 < isl.std() < 13
    assert 28 < osl.mean() < 32 and 3 < osl.std() < 7
    assert all(len(p.text.split()) == p.isl for p in ps)


def test_shared_prefix() -> None:
    spec = WorkloadSpec(kind="shared_prefix", isl=30, osl=5, num_prefixes=3, prefix_len=20)
    ps = build_prompts(spec, 9)
    prefixes = [" ".join(p.text.split()[:20]) for p in ps]
    assert len(set(prefixes)) == 3
    assert prefixes[0] == prefixes[3] == prefixes[6]
    assert len({p.text for p in ps}) == 9  # unique suffixes
    assert all(len(p.text.split()) == 30 and p.isl == 30 for p in ps)


def test_sharegpt_file(tmp_path: Path) -> None:
    data = [
        {
            "conversations": [
                {"from": "human", "value": "what is up"},
                {"from": "gpt", "value": "not much at all"},
            ]
        },
        {"conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"conversations": [{"from": "human", "value": "tell me more please"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    ps = build_prompts(WorkloadSpec(kind="sharegpt", path=str(path), osl=9), 4)
    by_text = {p.text: p for p in ps}
    assert set(by_text) == {"what is up", "tell me more please"}
    assert by_text["what is up"].osl == 4 and by_text["what is up"].isl == 3
    assert by_text["tell me more please"].osl == 9  # no reply: the spec's osl


def test_jsonl_file(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"prompt": "a b c", "output_tokens": 12}\n\n"just a string"\n'
        '{"text": "x y", "max_tokens": 3}\n'
    )
    ps = build_prompts(WorkloadSpec(kind="jsonl", path=str(path), osl=5, seed=4), 6)
    got = {(p.text, p.osl) for p in ps}
    assert got == {("a b c", 12), ("just a string", 5), ("x y", 3)}


def test_bad_files_and_specs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{nope\n")
    with pytest.raises(WorkloadError, match=r"bad\.jsonl:1"):
        build_prompts(WorkloadSpec(kind="jsonl", path=str(bad)), 1)
    with pytest.raises(WorkloadError, match="cannot read"):
        build_prompts(WorkloadSpec(kind="sharegpt", path=str(tmp_path / "missing.json")), 1)
    with pytest.raises(WorkloadError, match="needs a path"):
        WorkloadSpec(kind="jsonl")
    with pytest.raises(WorkloadError, match="prefix_len < isl"):
        WorkloadSpec(kind="shared_prefix", isl=10, num_prefixes=1, prefix_len=10)
    with pytest.raises(WorkloadError, match="Valid distributions"):
        WorkloadSpec(distribution="zipf")  # type: ignore[arg-type]


def test_fit_length_model() -> None:
    lm = fit_length_model([10, 20, 30], [23, 36, 49])  # 1.3 tokens/word + 10 overhead
    assert abs(lm.tokens_per_word - 1.3) < 1e-6 and abs(lm.overhead - 10) < 1e-6
    assert lm.words_for(140) == 100
    ratio = fit_length_model([10, 10], [15, 15])
    assert ratio.tokens_per_word == 1.5 and ratio.overhead == 0


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    # A small vocabulary: many words become several tokens, so exactness is tested.
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(WORDS, 50)) for _ in range(200)]
    tok.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def test_tokenizer_makes_lengths_exact(tiny_tokenizer: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tiny_tokenizer)
    spec = WorkloadSpec(
        isl=64,
        osl=4,
        isl_stddev=20,
        distribution="uniform",
        tokenizer=str(Path(tiny_tokenizer).parent),
    )
    assert not spec.needs_calibration
    for p in build_prompts(spec, 20):
        assert len(tok.encode(p.text, add_special_tokens=False).ids) == p.isl


def test_tokenizer_shared_prefix_exact(tiny_tokenizer: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tiny_tokenizer)
    spec = WorkloadSpec(
        kind="shared_prefix", isl=48, num_prefixes=2, prefix_len=32, tokenizer=tiny_tokenizer
    )
    for p in build_prompts(spec, 4):
        assert len(tok.encode(p.text, add_special_tokens=False).ids) == 48


def test_missing_tokenizer_file(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    with pytest.raises(WorkloadError, match="not found"):
        build_prompts(WorkloadSpec(tokenizer=str(tmp_path)), 1)


def test_request_body_chat_and_completions() -> None:
    cs = ClientSettings(
        "http://127.0.0.1:1",
        "m",
        extra_body={"stream_options": {"continuous_usage_stats": True}, "temperature": 0},
    )
    b = json.loads(request_body(cs, "hi", 7))
    assert b["messages"] == [{"role": "user", "content": "hi"}] and b["stream"] is True
    assert b["max_tokens"] == 7 and b["min_tokens"] == 7 and b["ignore_eos"] is True
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert b["temperature"] == 0
    cs2 = ClientSettings("http://127.0.0.1:1", "m", endpoint="completions", ignore_eos=False)
    b2 = json.loads(request_body(cs2, "hi", 3))
    assert b2["prompt"] == "hi" and "ignore_eos" not in b2 and "min_tokens" not in b2


def test_client_settings_validation_and_to_dict() -> None:
    from pytest_llmslo.errors import ConfigError

    with pytest.raises(ConfigError, match="/v1"):
        ClientSettings("http://h:1/v1", "m")
    with pytest.raises(ConfigError, match="Valid endpoints"):
        ClientSettings("http://h:1", "m", endpoint="embeddings")  # type: ignore[arg-type]
    d = ClientSettings("https://h", "m").to_dict()
    assert d["transport"] == "fast" and d["api_key_env"] == "OPENAI_API_KEY"
    assert ClientSettings("http://h", "m").to_dict()["transport"] == "fast"


# -- schedules ------------------------------------------------------------------------


def test_constant_schedule_is_absolute() -> None:
    offs = arrival_offsets_ns(LoadLevel.rate(4, "constant"), 5)
    assert offs == [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]


def test_poisson_schedule_is_seeded_with_the_right_rate() -> None:
    a = arrival_offsets_ns(LoadLevel.rate(50, "poisson", seed=3), 20000)
    assert a == arrival_offsets_ns(LoadLevel.rate(50, "poisson", seed=3), 20000)
    assert a != arrival_offsets_ns(LoadLevel.rate(50, "poisson", seed=4), 20000)
    gaps = np.diff(a) / 1e9
    assert a[0] == 0 and (gaps >= 0).all()
    assert abs(gaps.mean() - 0.02) < 0.001
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05  # exponential: CV = 1


def test_schedule_rejects_closed_loop() -> None:
    with pytest.raises(ValueError):
        arrival_offsets_ns(LoadLevel.concurrency(4), 3)


def test_splits() -> None:
    assert split_concurrency(10, 3) == [4, 3, 3] and split_concurrency(2, 4) == [1, 1]
    assert split_round_robin(5, 2) == [[0, 2, 4], [1, 3]]


@pytest.mark.parametrize(
    "spec",
    [
        WorkloadSpec(isl=64, osl=8, isl_stddev=16, osl_stddev=4),
        WorkloadSpec(kind="shared_prefix", isl=64, osl=8, num_prefixes=2, prefix_len=32),
        WorkloadSpec(isl=16, osl=8, turns=3),
    ],
    ids=["synthetic", "shared_prefix", "conversation"],
)
def test_a_salt_changes_the_words_never_the_lengths(spec: WorkloadSpec) -> None:
    from dataclasses import replace

    from pytest_llmslo.load.workload import PromptSource

    def prompts(salt: str) -> list[tuple[str, int, int]]:
        source = PromptSource(replace(spec, salt=salt))
        if spec.multi_turn:
            turns = [t for s in range(4) for t in source.conversation(s).turns]
        else:
            turns = [source.prompt(i) for i in range(8)]
        return [(p.text, p.isl, p.osl) for p in turns]

    plain, salted, again, other = prompts(""), prompts("run-a"), prompts("run-a"), prompts("run-b")
    assert salted == again  # the same salt repeats the prompts exactly
    for a, b, c in zip(plain, salted, other, strict=True):
        assert a[1:] == b[1:] == c[1:]  # the lengths asked for
        assert len(a[0].split()) == len(b[0].split()) == len(c[0].split())  # as many words
        assert len({a[0], b[0], c[0]}) == 3  # other words
    if not spec.multi_turn:  # no salt: the seed's prompts, as they always were
        assert plain == [(p.text, p.isl, p.osl) for p in build_prompts(spec, 8)]


def test_salted_shared_prefixes_are_still_shared_within_the_session() -> None:
    spec = WorkloadSpec(
        kind="shared_prefix", isl=64, osl=8, num_prefixes=2, prefix_len=32, salt="run-a"
    )
    prompts = build_prompts(spec, 6)
    heads = {p.text.split()[:32].__repr__() for p in prompts}
    assert len(heads) == 2  # two prefixes, each shared by half of the requests
    unsalted = build_prompts(WorkloadSpec(**{**spec.to_dict(), "salt": ""}), 6)
    assert prompts[0].text.split()[:32] != unsalted[0].text.split()[:32]


def test_salted_trace_blocks_are_shared_by_the_rows_that_share_their_ids(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1, 2]},
        {"timestamp": 10, "input_length": 40, "output_length": 4, "hash_ids": [1, 3]},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = WorkloadSpec(kind="trace", path=str(path), block_tokens=16, trace_format="mooncake")

    def first_block(salt: str) -> list[list[str]]:
        return [
            p.text.split()[:16]
            for p in build_prompts(WorkloadSpec(**{**spec.to_dict(), "salt": salt}), 2)
        ]

    a, b = first_block("run-a"), first_block("run-b")
    assert a[0] == a[1] and b[0] == b[1]  # block 1 is shared within a session
    assert a[0] != b[0]  # and not across salts


def test_tokenizer_lengths_stay_exact_with_a_salt(tiny_tokenizer: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tiny_tokenizer)
    spec = WorkloadSpec(
        isl=64, osl=4, isl_stddev=20, distribution="uniform", tokenizer=tiny_tokenizer, salt="x"
    )
    for p in build_prompts(spec, 20):
        assert len(tok.encode(p.text, add_special_tokens=False).ids) == p.isl
