"""Named profiles, custom profiles and the token-count rule."""

from __future__ import annotations

import pytest

from pytest_llmslo.sim.profiles import (
    DEFAULT_PROFILE,
    PROFILES,
    get_profile,
    profile_from_mapping,
)
from pytest_llmslo.sim.tokens import block_hashes, chat_tokens, completion_tokens, split_text


@pytest.mark.parametrize("setup", ["llama3-70b-fp8-4xh100", "llama3-8b-1xh100"])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_required_profiles_exist(setup: str, engine: str) -> None:
    p = get_profile(f"{setup}-{engine}")
    assert p.engine.name == engine
    cfg = p.scheduler_config()
    assert cfg.num_blocks * cfg.block_size > 100_000  # room for a real load
    assert p.to_dict()["num_blocks"] == cfg.num_blocks


def test_default_profile_numbers() -> None:
    p = get_profile(DEFAULT_PROFILE)
    assert p.tp == 4 and p.gpu.hbm_bw == 3.35e12 and p.gpu.fp8_flops == 1979e12
    m = p.model
    assert (m.layers, m.hidden, m.kv_heads, m.head_dim, m.weight_bytes) == (80, 8192, 8, 128, 1.0)


def test_engines_differ_in_scheduling() -> None:
    presets = {
        e: get_profile(f"llama3-70b-fp8-4xh100-{e}").engine for e in ("vllm", "sglang", "trtllm")
    }
    assert len({e.block_size for e in presets.values()}) == 3
    assert presets["trtllm"].step_overhead_s < presets["vllm"].step_overhead_s


def test_unknown_profile_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"Valid profiles: .*llama3-70b-fp8-4xh100-vllm"):
        get_profile("gpt-5")


def test_custom_profile_from_mapping() -> None:
    p = profile_from_mapping(
        {
            "base": "llama3-8b-1xh100-vllm",
            "name": "my-setup",
            "gpu": {"hbm_bw": 4.8e12},
            "model": {"layers": 40},
            "engine": {"max_num_seqs": 8, "block_size": 32},
            "tp": 2,
            "num_blocks": 1234,
        }
    )
    assert p.name == "my-setup" and p.tp == 2 and p.gpu.hbm_bw == 4.8e12
    assert p.model.layers == 40 and p.engine.block_size == 32
    assert p.scheduler_config().num_blocks == 1234
    with pytest.raises(ValueError, match="unknown gpu field"):
        profile_from_mapping({"gpu": {"bandwidth": 1}})
    with pytest.raises(ValueError, match="unknown profile key"):
        profile_from_mapping({"gpus": 2})
    assert set(PROFILES) >= {DEFAULT_PROFILE}


def test_without_chunked_prefill_the_budget_must_hold_a_whole_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_llmslo.sim.__main__ import main

    # As vLLM: a prompt longer than the budget could never be prefilled in one step.
    with pytest.raises(ValueError, match=r"--max-num-batched-tokens.*--max-model-len"):
        profile_from_mapping({"engine": {"chunked_prefill": False}})
    ok = profile_from_mapping({"engine": {"chunked_prefill": False}, "max_model_len": 2048})
    assert ok.scheduler_config().chunked_prefill is False
    assert main(["--no-chunked-prefill", "--show-profile"]) == 2
    err = capsys.readouterr().err
    assert "max_num_batched_tokens (2048) is smaller than max_model_len (8192)" in err
    assert "--max-num-batched-tokens" in err and "--max-model-len" in err
    assert main(["--no-chunked-prefill", "--max-num-batched-tokens", "8192", "--show-profile"]) == 0
    assert main(["--no-chunked-prefill", "--max-model-len", "2048", "--show-profile"]) == 0


def test_token_rule() -> None:
    assert split_text("Hello, world! It's 2 tokens") == [
        "Hello",
        ",",
        "world",
        "!",
        "It",
        "'",
        "s",
        "2",
        "tokens",
    ]
    assert len(completion_tokens("a b c")) == 4
    assert len(completion_tokens([1, 2, 3])) == 4
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi there"}]},
    ]
    assert len(chat_tokens(msgs)) == 1 + 2 * 5 + 4 + 2 + 2


def test_block_hashes_name_prefixes() -> None:
    a = block_hashes([str(i) for i in range(40)], 16)
    b = block_hashes([str(i) for i in range(32)] + ["x"] * 8, 16)
    c = block_hashes(["y"] + [str(i) for i in range(1, 40)], 16)
    assert len(a) == 2 and a == b  # full blocks only; same first 32 tokens
    assert not set(a) & set(c)  # a different first token changes every block's hash


def test_cli_flags_set_or_lift_the_prefill_limits() -> None:
    from pytest_llmslo.sim.__main__ import build_parser, resolve_profile

    args = build_parser().parse_args(
        ["--long-prefill-token-threshold", "0", "--max-num-partial-prefills", "0",
         "--max-num-seqs", "1024", "--prefill-interference", "0"]
    )  # fmt: skip
    prof = resolve_profile(args)
    cfg, cost = prof.scheduler_config(), prof.cost_model()
    assert (cfg.long_prefill_token_threshold, cfg.max_num_partial_prefills) == (0, 0)
    assert cfg.max_num_seqs == 1024 and cost.prefill_interference == 0.0
    # The vLLM-like default has them all set; a Dynamo-like worker none.
    default = get_profile(DEFAULT_PROFILE).scheduler_config()
    assert default.long_prefill_token_threshold > 0 and default.max_num_partial_prefills > 0
    worker = get_profile("llama3-70b-fp8-4xh100-dynamo-vllm")
    assert worker.scheduler_config().long_prefill_token_threshold == 0
    assert worker.cost_model().prefill_interference == 0.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-num-partial-prefills", "-1"])
