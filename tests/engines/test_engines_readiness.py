"""Readiness checks and version probes against canned answers (httpx.MockTransport)."""

from __future__ import annotations

import httpx

from pytest_llmslo.engines.readiness import (
    all_of,
    health_body_healthy,
    http_ok,
    models_listed,
    version_from_json,
)

BASE = "http://engine"


def _client(routes: dict[str, httpx.Response]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return routes.get(request.url.path, httpx.Response(404))

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_dynamo_health_200_with_unhealthy_body_is_not_ready() -> None:
    body = {"status": "unhealthy", "endpoints": [], "instances": []}
    with _client({"/health": httpx.Response(200, json=body)}) as c:
        assert "unhealthy" in (health_body_healthy()(c, BASE) or "")
    with _client({"/health": httpx.Response(200, json={"status": "healthy"})}) as c:
        assert health_body_healthy()(c, BASE) is None


def test_models_listed() -> None:
    models = {"object": "list", "data": [{"id": "a"}, {"id": "b"}]}
    with _client({"/v1/models": httpx.Response(200, json=models)}) as c:
        assert models_listed()(c, BASE) is None
        assert models_listed("b")(c, BASE) is None
        assert "lists a, b; --model c is not one of them" in (models_listed("c")(c, BASE) or "")
    with _client({"/v1/models": httpx.Response(200, json={"data": []})}) as c:
        assert "lists no model" in (models_listed()(c, BASE) or "")


def test_connection_refused_is_a_reason_not_an_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as c:
        assert "ConnectError" in (http_ok("/health")(c, BASE) or "")


def test_all_of_reports_the_first_missing() -> None:
    with _client({"/health": httpx.Response(200)}) as c:
        reason = all_of(http_ok("/health"), http_ok("/health_generate"))(c, BASE)
    assert reason == "GET /health_generate: HTTP 404"


def test_version_probes() -> None:
    routes = {
        "/version": httpx.Response(200, json={"version": "0.32.0"}),
        "/server_info": httpx.Response(200, json={"internal_states": [{}], "version": "0.5.21"}),
        "/nested": httpx.Response(200, json={"server": {"version": "1.2"}}),
        "/text": httpx.Response(200, text="1.3.0rc29\n"),
    }
    with _client(routes) as c:
        assert version_from_json("/version")(c, BASE) == "0.32.0"
        assert version_from_json("/server_info")(c, BASE) == "0.5.21"
        assert version_from_json("/nested")(c, BASE) == "1.2"
        assert version_from_json("/text")(c, BASE) == "1.3.0rc29"
        assert version_from_json("/missing")(c, BASE) is None
