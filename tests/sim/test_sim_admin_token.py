"""The sim's admin endpoints change the engine's behaviour: beyond loopback they need a
token, and a token once set is needed everywhere (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.engines.sim import plan
from pytest_llmslo.sim.admintoken import TOKEN_ENV, is_loopback, refusal

try:
    from tests.sim.sim_helpers import start_sim
except ImportError:  # run from tests/sim
    from sim_helpers import start_sim  # type: ignore[no-redef]

BODY = {"add": 1}


def test_loopback_is_open_anything_else_needs_the_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("h")
    assert refusal("127.0.0.1", None, {}) is None
    why = refusal("0.0.0.0", None, {})
    assert why is not None and TOKEN_ENV in why and "0.0.0.0" in why
    assert refusal("0.0.0.0", "t0ken", {"authorization": "Bearer t0ken"}) is None
    assert refusal("127.0.0.1", "t0ken", {"authorization": "Bearer wrong"}) is not None
    assert refusal("127.0.0.1", "t0ken", {}) is not None


def test_a_sim_beyond_loopback_without_a_token_refuses_its_admin_endpoints(
    tmp_path: Path,
) -> None:
    with start_sim(tmp_path, "--host", "0.0.0.0") as sim:
        url = sim.url.replace("0.0.0.0", "127.0.0.1")
        resp = httpx.post(url + "/admin/replicas", json=BODY, timeout=10)
        assert resp.status_code == 401
        assert TOKEN_ENV in resp.json()["error"]["message"]
        assert httpx.get(url + "/health", timeout=10).status_code == 200  # serving goes on


def test_with_a_token_only_the_holder_changes_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "a-token-for-this-test")
    with start_sim(tmp_path, "--host", "0.0.0.0", "--replicas", "1") as sim:
        url = sim.url.replace("0.0.0.0", "127.0.0.1") + "/admin/replicas"
        assert httpx.post(url, json=BODY, timeout=10).status_code == 401
        wrong = {"Authorization": "Bearer another"}
        assert httpx.post(url, json=BODY, headers=wrong, timeout=10).status_code == 401
        right = {"Authorization": "Bearer a-token-for-this-test"}
        resp = httpx.post(url, json=BODY, headers=right, timeout=10)
        assert resp.status_code == 200 and resp.json()["adding"]


def test_the_session_hands_its_token_to_a_sim_beyond_loopback_only() -> None:
    local = plan(EngineConfig(name="s", kind="sim", host="127.0.0.1", port=8123))
    assert TOKEN_ENV not in local.processes[0].env
    wide = plan(EngineConfig(name="s", kind="sim", host="0.0.0.0", port=8123))
    assert wide.processes[0].env[TOKEN_ENV]
    # A container binds its own interfaces: its image unit always carries the token, as a
    # secret the runtime hands over privately (never a literal env value of the unit).
    assert all(img.secret_env[TOKEN_ENV] and TOKEN_ENV not in img.env for img in wide.images)
    assert all(img.secret_env[TOKEN_ENV] for img in local.images)
