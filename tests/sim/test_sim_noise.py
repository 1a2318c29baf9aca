"""The sim's run-to-run noise: off by default, a seeded per-run speed factor, a per-step
jitter of the asked spread, and the flags that set them."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from pytest_llmslo.sim.__main__ import build_parser, resolve_profile
from pytest_llmslo.sim.costmodel import CostModel
from pytest_llmslo.sim.profiles import DEFAULT_PROFILE, get_profile
from pytest_llmslo.sim.speednoise import NoisyCostModel, SimNoise

DECODES = [(512, 1)] * 16


def test_noise_is_off_by_default() -> None:
    profile = get_profile(DEFAULT_PROFILE)
    assert not profile.noise.active
    assert type(profile.cost_model()) is CostModel
    assert "noise" not in profile.to_dict()


def test_a_seed_draws_the_same_run_and_another_seed_another() -> None:
    a = SimNoise.draw(run_sigma=0.015, seed=1)
    assert a == SimNoise.draw(run_sigma=0.015, seed=1)
    assert a.speed != SimNoise.draw(run_sigma=0.015, seed=2).speed
    speeds = [SimNoise.draw(run_sigma=0.015, seed=s).speed for s in range(400)]
    assert statistics.pstdev(speeds) == pytest.approx(0.015, rel=0.15)
    assert SimNoise.draw(speed=1.1, seed=None).speed == 1.1  # no run noise: the factor


def test_step_times_carry_the_speed_and_the_jitter() -> None:
    profile = get_profile(DEFAULT_PROFILE)
    base = profile.cost_model().step(DECODES).total_s
    slow = dataclasses.replace(profile, noise=SimNoise(speed=1.1)).cost_model()
    assert isinstance(slow, NoisyCostModel)
    assert slow.step(DECODES).total_s == pytest.approx(1.1 * base)
    jittery = dataclasses.replace(profile, noise=SimNoise(step_sigma=0.03, seed=5)).cost_model()
    ratios = [jittery.step(DECODES).total_s / base for _ in range(3000)]
    assert statistics.mean(ratios) == pytest.approx(1.0, abs=0.003)
    assert statistics.stdev(ratios) == pytest.approx(0.03, rel=0.1)
    again = dataclasses.replace(profile, noise=SimNoise(step_sigma=0.03, seed=5)).cost_model()
    assert [again.step(DECODES).total_s / base for _ in range(3000)] == ratios
    assert jittery.step([]).total_s == 0.0  # an idle step stays free


def test_the_flags_set_the_noise_and_bad_values_are_named() -> None:
    args = build_parser().parse_args(
        [
            "--speed-factor",
            "1.1",
            "--run-noise",
            "0.015",
            "--step-jitter",
            "0.03",
            "--noise-seed",
            "7",
        ]
    )
    profile = resolve_profile(args)
    assert profile.noise == SimNoise.draw(speed=1.1, run_sigma=0.015, step_sigma=0.03, seed=7)
    assert profile.to_dict()["noise"]["seed"] == 7
    profile.cluster()  # a noisy profile builds its instances
    with pytest.raises(ValueError, match="--run-noise must be between 0 and 1"):
        resolve_profile(build_parser().parse_args(["--run-noise", "1.5"]))
    with pytest.raises(ValueError, match="--speed-factor must be a positive number"):
        resolve_profile(build_parser().parse_args(["--speed-factor", "0"]))
