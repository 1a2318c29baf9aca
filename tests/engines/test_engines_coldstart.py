"""The cold start of an engine the harness starts: each phase timed and in order (the sim
as a process; with the docker marker, the sim image in a container), a start that ends
only with one real streamed token, and a first token that never comes failing the start
with what the engine answered (``tests/misbehaving_server.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_llmslo.engines import EngineConfig, start_engine, startup
from pytest_llmslo.engines.coldstart import PHASES, ColdStart, StartClock, unit_marks
from pytest_llmslo.engines.launch import launch
from pytest_llmslo.engines.launchplan import LaunchPlan
from pytest_llmslo.engines.ports import pick_free_port, port_is_free
from pytest_llmslo.engines.readiness import models_listed
from pytest_llmslo.engines.units import ProcessUnit
from pytest_llmslo.errors import EngineStartError, EngineUnavailable

MISBEHAVING = Path(__file__).resolve().parents[1] / "misbehaving_server.py"


def _in_order(cold: ColdStart) -> list[str]:
    """The phases the start reached, and a check that their times only grow."""
    seen = [(name, s) for name, s in cold.ordered() if s is not None]
    times = [s for _, s in seen]
    assert times == sorted(times), f"phases out of order: {seen}"
    return [name for name, _ in seen]


def test_the_sim_process_start_is_timed_phase_by_phase() -> None:
    said: list[startup.StartupPhase] = []
    with startup.reporting(said.append):
        handle = start_engine(EngineConfig(kind="sim", name="sim", startup_timeout_s=60))
    try:
        cold = handle.cold_start  # type: ignore[attr-defined]
        assert isinstance(cold, ColdStart)
        assert cold.runtime == "process"
        assert _in_order(cold) == [
            "spawned_s", "port_open_s", "ready_s", "model_listed_s", "first_token_s"
        ]  # fmt: skip
        # The first token came from a real completion, after everything else.
        assert cold.first_token["endpoint"] == "/v1/chat/completions"
        assert 0 < cold.first_token["ttft_s"] <= cold.total_s  # type: ignore[operator]
        meta = handle.metadata()
        assert meta["cold_start"] == cold.to_dict()
        assert meta["startup_s"] >= cold.total_s  # type: ignore[operator]
    finally:
        handle.stop()
    # While it waited, the progress line named the phase.
    assert said and all(p.phase in (*PHASES, "starting") for p in said)
    assert said[0].waiting_for.startswith("starting ")


def _misbehaving_plan(mode: str, timeout_s: float = 30.0) -> LaunchPlan:
    port = pick_free_port()
    cfg = EngineConfig(kind="external", name=f"bad-{mode}", startup_timeout_s=timeout_s)
    argv = (sys.executable, str(MISBEHAVING), "--mode", mode, "--port", str(port))
    return LaunchPlan(
        config=cfg,
        host="127.0.0.1",
        port=port,
        model="m",
        ready=models_listed("m"),
        processes=(ProcessUnit(argv=argv, role="server"),),
        ports=(port,),
    )


def test_a_well_behaved_server_passes_every_phase() -> None:
    plan = _misbehaving_plan("ok")
    handle = launch(plan)
    try:
        cold = handle.cold_start
        assert cold is not None and cold.get("first_token_s") is not None
        assert _in_order(cold)[-1] == "first_token_s"
    finally:
        handle.stop()
    assert port_is_free(plan.port)


@pytest.mark.parametrize(
    ("mode", "answered"),
    [
        ("reset", "ReadError"),  # the connection reset on every completion
        ("empty-choices", "the stream ended without output"),
        ("auth-completions", "HTTP 401"),
    ],
)
def test_a_start_without_a_first_token_fails_saying_what_the_engine_answered(
    mode: str, answered: str
) -> None:
    plan = _misbehaving_plan(mode)
    with pytest.raises(EngineStartError) as info:
        launch(plan)
    text = str(info.value)
    assert "ready and listing m, but its first streamed completion did not stream a token" in text
    assert "POST /v1/c" in text and (answered in text or "RemoteProtocolError" in text), text
    # Nothing is left running: the port is free again.
    assert port_is_free(plan.port)


def test_the_marks_keep_their_first_time_and_the_latest_unit() -> None:
    clock = StartClock("process", t0=100.0)
    clock.expect("port_open_s")
    assert clock.mark("ready_s", at=101.5) == 1.5
    assert clock.mark("ready_s", at=103.0) == 1.5  # the first mark stays

    class Unit:
        def __init__(self, at: float) -> None:
            self.at = at

        def marks(self) -> dict[str, float]:
            return {"spawned_s": self.at, "bogus": 1.0}

    assert unit_marks([Unit(100.2), Unit(100.4)]) == {"spawned_s": 100.4}
    clock.from_units([Unit(100.2), Unit(100.4)])
    record = clock.record()
    assert record.get("spawned_s") == pytest.approx(0.4)
    assert record.phases["port_open_s"] is None  # expected, never seen
    assert ColdStart.from_dict(record.to_dict()) == ColdStart(
        "process", {"spawned_s": 0.4, "port_open_s": None, "ready_s": 1.5}
    )
    with pytest.raises(ValueError, match="unknown start phase"):
        clock.mark("warmed_up_s")


def test_a_pod_gives_the_cluster_figures() -> None:
    class Pod:
        def cold_start(self) -> dict[str, object]:
            return {"pod": "p-1", "scheduled_s": 1.0, "image_pulled_s": 3.0,
                    "container_started_s": 4.0, "ready_s": 7.0}  # fmt: skip

    clock = StartClock("kubernetes", t0=0.0)
    clock.from_units([Pod()])
    clock.mark("ready_s", at=7.4)
    cold = clock.record()
    assert cold.cluster == {"pod": "p-1", "scheduled_s": 1.0, "image_pulled_s": 3.0,
                            "container_started_s": 4.0, "ready_s": 7.0}  # fmt: skip
    assert [n for n, _ in cold.ordered()] == [
        "image_pulled_s", "scheduled_s", "container_started_s", "pod_ready_s", "ready_s"
    ]  # fmt: skip
    assert cold.get("pod_ready_s") == 7.0 and cold.get("ready_s") == 7.4


@pytest.mark.docker
def test_the_sim_container_start_is_timed_phase_by_phase() -> None:
    from pytest_llmslo.engines.runtimes import docker as dk

    try:
        client = dk.docker_client()
        client.images.get("pytest-llmslo/sim:local")
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    except Exception:
        pytest.skip("image pytest-llmslo/sim:local not built (bash docker/build-sim-image.sh)")
    handle = start_engine(EngineConfig(kind="sim", runtime="docker", startup_timeout_s=120))
    try:
        cold = handle.cold_start  # type: ignore[attr-defined]
        assert cold.runtime == "docker"
        assert _in_order(cold) == [
            "image_pulled_s", "container_created_s", "container_started_s", "port_open_s",
            "ready_s", "model_listed_s", "first_token_s",
        ]  # fmt: skip
    finally:
        handle.stop()


def test_a_pod_start_adds_the_harness_phases_to_the_clusters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kubernetes runtime against kmock (k8s_cluster.py plays the controllers and
    # forwards the pod's port to a sim process): the cluster's phases from its own
    # timestamps, then readiness, the model and the first token through the port-forward.
    pytest.importorskip("kmock")
    pytest.importorskip("kubernetes")
    import subprocess

    from k8s_cluster import Controller, fake_cluster, ready

    from pytest_llmslo.engines import load_engine_configs, plan_engine
    from pytest_llmslo.engines.runtimes.k8s import ownership
    from pytest_llmslo.engines.runtimes.k8s.kubeclient import forget_clients

    port = pick_free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmslo.sim", "--host", "127.0.0.1", "--port", str(port),
         "--model", "llmslo-sim"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with fake_cluster(tmp_path) as cluster:
            monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
            monkeypatch.setattr(ownership, "SESSION_OWNERS", ownership.SessionOwners())
            forget_clients()
            cluster.forward_to(port)
            cfg = load_engine_configs(
                {"sim": {"runtime": "kubernetes", "kubernetes": {"namespace": "bench"}}}
            )["sim"]
            with Controller(cluster, "bench", lambda c, ns, pod: ready(c, ns, pod)):
                handle = launch(plan_engine(cfg), poll_s=0.1)
                try:
                    cold = handle.cold_start
                finally:
                    handle.stop()
            forget_clients()
    finally:
        sim.terminate()
        sim.wait(10)
    assert cold is not None and cold.runtime == "kubernetes"
    assert cold.cluster is not None and cold.cluster["ready_s"] == 7.0
    phases = dict(cold.ordered())
    cluster_phases = ("scheduled_s", "image_pulled_s", "container_started_s", "pod_ready_s")
    assert [phases[k] for k in cluster_phases] == [1.0, 3.0, 4.0, 7.0]
    harness = [phases["ready_s"], phases["model_listed_s"], phases["first_token_s"]]
    assert None not in harness
    assert harness == sorted(harness)  # type: ignore[type-var]
    assert "port_open_s" not in phases  # the pod's port is not on this machine
