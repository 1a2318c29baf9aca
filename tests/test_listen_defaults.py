"""Every server the project starts listens on loopback unless the user names another
address (docs/security.md): the sim, the known-timing server, the engines' default host,
the fault proxy and the Kubernetes port-forward."""

from __future__ import annotations

import inspect

from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.engines.runtimes.k8s import forward
from pytest_llmslo.faults.proxy import FaultProxy
from pytest_llmslo.sim.__main__ import build_parser


def test_the_sim_listens_on_loopback_by_default() -> None:
    assert build_parser().parse_args([]).host == "127.0.0.1"


def test_the_engines_and_the_fault_proxy_listen_on_loopback_by_default() -> None:
    assert EngineConfig(name="e", kind="sim").host == "127.0.0.1"
    assert inspect.signature(FaultProxy).parameters["listen_host"].default == "127.0.0.1"


def test_the_known_timing_server_and_the_port_forward_bind_loopback() -> None:
    from pytest_llmslo.sim import truth_server

    assert 'ap.add_argument("--host", default="127.0.0.1"' in inspect.getsource(truth_server.main)
    src = inspect.getsource(forward.PortForwarder)
    assert 'bind(("127.0.0.1", 0))' in src and "0.0.0.0" not in src
