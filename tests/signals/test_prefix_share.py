"""What a workload shares of its prompts, and the warm-cache warning when the engine's
prefix-hit rate is far above it."""

from __future__ import annotations

import pytest

from pytest_llmslo.signals.prefix_share import (
    WARM_MARGIN,
    expected_prefix_share,
    warm_cache_warning,
)


def test_what_each_workload_shares() -> None:
    assert expected_prefix_share("synthetic", isl=512, osl=64) == 0.0
    # The chat template a calibration measured is shared by every prompt.
    assert expected_prefix_share("synthetic", isl=500, osl=64, overhead=12) == pytest.approx(
        12 / 512
    )
    assert expected_prefix_share("shared_prefix", isl=1000, osl=64, prefix_len=600) == 0.6
    # Two turns of 100-token messages and 100-token replies: turn 2 resends 200 of 300.
    assert expected_prefix_share("synthetic", isl=100, osl=100, turns=2) == pytest.approx(200 / 400)
    assert expected_prefix_share("sharegpt", isl=512, osl=64) is None
    assert expected_prefix_share("trace", isl=512, osl=64) is None


def test_a_hit_rate_far_above_the_share_is_a_warning_with_both_numbers() -> None:
    text = warm_cache_warning(0.97, 0.0)
    assert text is not None and "97%" in text and "0%" in text and "--reset-cache" in text
    assert warm_cache_warning(0.6 + WARM_MARGIN - 0.01, 0.6) is None  # what it was built for
    assert warm_cache_warning(None, 0.0) is None
    assert warm_cache_warning(0.9, None) is None  # a dataset: nothing to compare
