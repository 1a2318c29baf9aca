"""Exact prompt lengths with a local byte-level BPE tokenizer: across the join of a shared
prefix and its suffix, and on the server's side of a chat template (the overhead probe)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import numpy as np
import pytest

from pytest_llmslo.load import (
    ClientSettings,
    LengthModel,
    LoadJob,
    WorkloadSpec,
    build_prompts,
    run_load,
)
from pytest_llmslo.load.promptlengths import WORDS
from pytest_llmslo.records import LoadLevel

from .conftest import chunk, read_request, scripted_server

tokenizers = pytest.importorskip("tokenizers")

SPECIALS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


@pytest.fixture(scope="module")
def byte_bpe(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A byte-level BPE (GPT-2 / Llama 3 style, as tests/engines/tiny_model.py builds)
    with a small vocabulary: most words are several tokens, and a word after a space
    (" water" -> "Ġw", ...) is tokenized apart from the same word at the start."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rng = np.random.default_rng(0)
    tok.train_from_iterator([" ".join(rng.choice(WORDS, 50)) for _ in range(200)], trainer)
    folder = tmp_path_factory.mktemp("byte_bpe")
    tok.save(str(folder / "tokenizer.json"))
    return str(folder)


def counter(path: str) -> Callable[[str], int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path + "/tokenizer.json")
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def shared_head(texts: list[str]) -> str:
    """The prefix the texts share, up to the space that joins it to each suffix."""
    first, last = min(texts), max(texts)
    n = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))
    return first[:n].rsplit(" ", 1)[0]


def test_the_join_of_prefix_and_suffix_is_counted(byte_bpe: str) -> None:
    count = counter(byte_bpe)
    # The premise: the space before a word changes its tokens.
    assert count("water") != count(" water") or count("the") != count(" the")
    spec = WorkloadSpec(
        kind="shared_prefix", isl=48, num_prefixes=2, prefix_len=32, tokenizer=byte_bpe
    )
    prompts = build_prompts(spec, 20)
    assert prompts == build_prompts(spec, 20)
    for p in prompts:
        assert p.isl == 48 and count(p.text) == 48, p.text
    # Two prefixes of exactly 32 tokens, each shared by half of the requests.
    heads = [shared_head([p.text for p in prompts[k::2]]) for k in (0, 1)]
    assert heads[0] != heads[1] and [count(h) for h in heads] == [32, 32]


def test_synthetic_lengths_are_exact_with_a_byte_level_bpe(byte_bpe: str) -> None:
    count = counter(byte_bpe)
    spec = WorkloadSpec(isl=64, isl_stddev=20, distribution="uniform", tokenizer=byte_bpe)
    for p in build_prompts(spec, 20):
        assert count(p.text) == p.isl


def test_server_overhead_comes_off_the_text(byte_bpe: str) -> None:
    count = counter(byte_bpe)
    lm = LengthModel(overhead=4.0)
    for p in build_prompts(WorkloadSpec(isl=40, tokenizer=byte_bpe), 5, lm):
        assert p.isl == 40 and count(p.text) == 36
    spec = WorkloadSpec(
        kind="shared_prefix", isl=48, num_prefixes=1, prefix_len=32, tokenizer=byte_bpe
    )
    prompts = build_prompts(spec, 6, lm)
    for p in prompts:
        assert p.isl == 48 and count(p.text) == 44
    # The overhead came off the shared prefix (the server's template header joins it).
    assert count(shared_head([p.text for p in prompts])) == 28


def template_server(
    byte_bpe: str, seen: list[int], *, count_words: bool = False
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]:
    """A server that counts prompt tokens as vLLM does with this tokenizer: the chat
    template ``<s><|user|>{content}</s><|assistant|>`` (4 tokens of overhead) or ``<s>``
    before a completion prompt (1), tokenized whole without added special tokens.
    ``count_words`` counts words instead (a server whose tokenizer is another one)."""
    count = counter(byte_bpe)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            body = json.loads(await read_request(reader))
            if "messages" in body:
                turns = "".join(f"<|{m['role']}|>{m['content']}</s>" for m in body["messages"])
                text = "<s>" + turns + "<|assistant|>"
            else:
                text = "<s>" + body["prompt"]
            n = len(text.split()) if count_words else count(text)
            seen.append(n)
            delta = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}
            last = {
                "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1},
            }
            writer.write(
                SSE_HEAD
                + chunk(b"data: " + json.dumps(delta).encode() + b"\n\n")
                + chunk(b"data: " + json.dumps(last).encode() + b"\n\n")
                + chunk(b"data: [DONE]\n\n")
                + b"0\r\n\r\n"
            )
            await writer.drain()

    return handler


@pytest.mark.parametrize(("endpoint", "overhead"), [("chat", 4), ("completions", 1)])
@pytest.mark.parametrize("kind", ["synthetic", "shared_prefix"])
async def test_server_side_prompt_length_is_exact(
    byte_bpe: str, endpoint: str, overhead: int, kind: str
) -> None:
    seen: list[int] = []
    if kind == "shared_prefix":
        spec = WorkloadSpec(
            kind="shared_prefix",
            isl=48,
            osl=1,
            num_prefixes=2,
            prefix_len=32,
            tokenizer=byte_bpe,
        )
    else:
        spec = WorkloadSpec(
            isl=40, osl=1, isl_stddev=10, distribution="uniform", seed=4, tokenizer=byte_bpe
        )
    async with scripted_server(template_server(byte_bpe, seen)) as url:
        cs = ClientSettings(url, "m", endpoint=endpoint, processes=1)  # type: ignore[arg-type]
        run = await run_load(LoadJob(cs, spec, LoadLevel.concurrency(2), requests=12, warmup=0))
    cal = run.meta["calibration"]
    assert cal["fitted"] and cal["overhead"] == overhead, cal
    # The probes, the measured requests and the closed loop's cool-down requests (those
    # cut when the last measured one ended may not have reached the server).
    sent = len(cal["probe_tokens"]) + 12
    assert sent <= len(seen) <= sent + run.meta["cooldown_sent"]
    assert len(run.records) == 12 and all(r.ok for r in run.records)
    for r in run.records:
        assert r.prompt_tokens == r.requested_prompt_tokens, r
    if kind == "synthetic":
        assert len({r.prompt_tokens for r in run.records}) > 1  # lengths drawn per request


async def test_a_tokenizer_that_is_not_the_servers_is_reported(byte_bpe: str) -> None:
    seen: list[int] = []
    spec = WorkloadSpec(isl=40, osl=1, tokenizer=byte_bpe)
    async with scripted_server(template_server(byte_bpe, seen, count_words=True)) as url:
        cs = ClientSettings(url, "m", processes=1)
        run = await run_load(LoadJob(cs, spec, LoadLevel.concurrency(1), requests=2, warmup=0))
    cal = run.meta["calibration"]
    assert not cal["fitted"] and "not the server's" in cal["error"]
    # Lengths then follow the tokenizer alone.
    count = counter(byte_bpe)
    prompts = build_prompts(spec, 2)
    assert all(count(p.text) == 40 for p in prompts)


async def test_no_probe_without_calibrate(byte_bpe: str) -> None:
    seen: list[int] = []
    spec = WorkloadSpec(isl=40, osl=1, tokenizer=byte_bpe, calibrate=False)
    async with scripted_server(template_server(byte_bpe, seen)) as url:
        cs = ClientSettings(url, "m", processes=1)
        run = await run_load(LoadJob(cs, spec, LoadLevel.concurrency(1), requests=2, warmup=0))
    assert not run.meta["calibration"]["fitted"] and len(seen) == 2
    assert all(r.prompt_tokens == 44 for r in run.records)  # the template's 4 on top


def test_a_salt_keeps_shared_prefixes_and_lengths_exact(byte_bpe: str) -> None:
    count = counter(byte_bpe)
    spec = WorkloadSpec(
        kind="shared_prefix", isl=48, num_prefixes=2, prefix_len=32, tokenizer=byte_bpe, salt="s1"
    )
    prompts = build_prompts(spec, 20)
    for p in prompts:
        assert p.isl == 48 and count(p.text) == 48, p.text
    heads = [shared_head([p.text for p in prompts[k::2]]) for k in (0, 1)]
    assert [count(h) for h in heads] == [32, 32]
    plain = build_prompts(WorkloadSpec(**{**spec.to_dict(), "salt": ""}), 2)
    assert not plain[0].text.startswith(heads[0])
