"""Real NVIDIA Dynamo 1.6 (``python -m dynamo.frontend`` + ``python -m dynamo.mocker``)
started by the Dynamo launcher with file discovery, TCP request plane and ZMQ event plane:
aggregated and disaggregated, one streamed request each with content, version recorded,
stop leaves no process and frees the port. Needs ``bash .ci/engines.sh dynamo model``."""

from __future__ import annotations

import httpx
import pytest
from engines_helpers import group_alive, stream_chat

from pytest_llmslo.engines import EngineConfig, start_engine
from pytest_llmslo.engines.ports import port_is_free
from pytest_llmslo.engines.runtimes.process import ManagedProcess

pytestmark = pytest.mark.dynamo


def _run(config: EngineConfig, expect_workers: int) -> None:
    handle = start_engine(config)
    port = int(handle.base_url.rsplit(":", 1)[1])
    units = [u for u in handle._units if isinstance(u, ManagedProcess)]
    try:
        assert len(units) == 1 + expect_workers
        health = httpx.get(handle.base_url + "/health").json()
        assert health["status"] == "healthy"
        pieces, usage = stream_chat(handle.base_url, handle.model, max_tokens=24)
        assert pieces and "".join(pieces).strip(), "the mocker streamed no content"
        assert usage.get("completion_tokens") == 24
        assert handle.version() == "1.6.1"
        meta = handle.metadata()
        assert meta["dynamo_worker"] == "mocker"
        frontend = meta["units"][0]
        assert frontend["argv"][1:3] == ["-m", "dynamo.frontend"]
        assert frontend["env"]["DYN_TCP_RPC_HOST"] == "127.0.0.1"
    finally:
        handle.stop()
    for u in units:
        assert not group_alive(u.pgid), f"{u.spec.role} left processes behind"
    assert port_is_free(port)


def test_dynamo_mocker_aggregated(dynamo_config: EngineConfig) -> None:
    _run(dynamo_config, expect_workers=1)


def test_dynamo_mocker_disaggregated(dynamo_config: EngineConfig) -> None:
    from dataclasses import replace

    cfg = replace(dynamo_config, options={"worker": "mocker", "mode": "disagg"})
    _run(cfg, expect_workers=2)
