"""Secrets are masked wherever the package shows them."""

from __future__ import annotations

from pytest_llmslo.redact import (
    redact_argv,
    redact_env,
    redact_text,
    secret_values,
)


def test_env_values_of_secret_names_are_masked() -> None:
    env = {"HF_TOKEN": "hf_x1234", "OPENAI_API_KEY": "sk-1234", "CUDA_VISIBLE_DEVICES": "0"}
    assert redact_env(env) == {"HF_TOKEN": "***", "OPENAI_API_KEY": "***",
                               "CUDA_VISIBLE_DEVICES": "0"}  # fmt: skip


def test_secret_flags_are_masked_in_both_spellings() -> None:
    argv = ["serve", "--api-key", "sk-abcdef", "--hf-token=hf_abcdef", "--port", "8000"]
    secrets = secret_values({}, argv)
    assert set(secrets) == {"sk-abcdef", "hf_abcdef"}
    assert redact_argv(argv, secrets) == ["serve", "--api-key", "***", "--hf-token=***",
                                          "--port", "8000"]  # fmt: skip


def test_known_secrets_are_masked_in_text() -> None:
    secrets = secret_values({"HF_TOKEN": "hf_secretvalue"})
    assert redact_text("token hf_secretvalue used", secrets) == "token *** used"
    # Short values are not treated as secrets (they would mask ordinary text).
    assert secret_values({"HF_TOKEN": "x"}) == []
