"""Each level's line says the load the client applied against the load asked."""

from __future__ import annotations

import re

import pytest

LEVELS = """
import pytest

@pytest.mark.slo(concurrency=[2], isl=8, osl=8, requests=12, warmup=2)
def test_closed(slo_run):
    pass

@pytest.mark.slo(rate=[5], isl=8, osl=8, requests=12, warmup=0)
def test_open(slo_run):
    pass
"""


@pytest.mark.slow
def test_the_level_line_shows_the_load_applied_against_the_load_asked(
    slo_pytester: pytest.Pytester,
) -> None:
    slo_pytester.makepyfile(test_levels=LEVELS)
    result = slo_pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", "--engine=sim")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    ok = r"llmslo sim {}: 12/12 requests ok in \S+ s "
    closed = re.search(ok.format("c2") + r"\[([\d.]+) of 2 in flight\]", out)
    assert closed, out
    assert 1.8 <= float(closed.group(1)) <= 2.0  # a closed loop of 2 keeps 2 in flight
    sent = re.search(ok.format("r5") + r"\[(\S+) of (\S+) req/s sent\]", out)
    assert sent, out
    # The rate the requests were sent at is the rate their schedule asked.
    assert float(sent.group(1)) == pytest.approx(float(sent.group(2)), rel=0.1)
    # Each level's line says where the session stands: test i/N, level j/M, and, once the
    # first level has given an estimate, the time left.
    assert re.search(r"llmslo sim c2: .*; level [\d.]+ s · test 1/2, level 1/1\n", out), out
    assert re.search(r"llmslo sim r5: .*; level [\d.]+ s · test 2/2, level 1/1, ~\d+ s left", out)
