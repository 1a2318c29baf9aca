"""Secrets are masked wherever text reaches an output: the ones the package knows (the
API key it sends, a URL's password) and the ones it recognises (credentials after an auth
scheme or a secret-looking key), with the message around them kept."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_llmslo.redact import (
    MASK,
    forget_all,
    redact,
    redact_obj,
    redact_url,
    remember,
    url_password,
)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget_all()
    yield
    forget_all()


def test_a_remembered_key_is_masked_and_the_message_kept() -> None:
    remember("sk-live-0123456789")
    assert redact("HTTP 401: invalid key sk-live-0123456789") == f"HTTP 401: invalid key {MASK}"
    remember("abc")  # too short to be a real token: ordinary text stays
    assert redact("abc def") == "abc def"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("invalid key Bearer tok_ABCDEFGH", "invalid key Bearer ***"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic ***"),
        ('{"api_key": "k-998877"}', '{"api_key": "***"}'),
        ("x-api-key: k-998877", "x-api-key: ***"),
        ("GET /v1/models?api_key=k-998877&a=1", "GET /v1/models?api_key=***&a=1"),
        (
            "GET http://me:hunter22@10.0.0.1:80/x: refused",
            "GET http://me:***@10.0.0.1:80/x: refused",
        ),
        (
            "OPENAI_API_KEY is read from $OPENAI_API_KEY",
            "OPENAI_API_KEY is read from $OPENAI_API_KEY",
        ),
        ("http://127.0.0.1:8000/v1/models: HTTP 404", "http://127.0.0.1:8000/v1/models: HTTP 404"),
    ],
)
def test_secrets_the_package_did_not_know_are_recognised(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_urls_lose_their_password_only() -> None:
    url = "http://user:pw@engine:8000/v1"
    assert url_password(url) == "pw"
    assert redact_url(url) == "http://user:***@engine:8000/v1"
    assert redact_url("https://engine:8443") == "https://engine:8443"


def test_a_document_is_redacted_throughout() -> None:
    remember("s3cr3t-value")
    doc = {"engines": {"x": {"base_url": "http://u:s3cr3t-value@h"}}, "n": [1.5, "s3cr3t-value"]}
    out = redact_obj(doc)
    assert "s3cr3t-value" not in repr(out)
    assert out["n"][0] == 1.5
