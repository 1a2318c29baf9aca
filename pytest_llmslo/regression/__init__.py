"""Regression checks: a later run against a saved baseline, per test, engine and load level.

- ``documents``: ``compare_test`` (one test's points and capacity against the baseline's,
  used by the session and by ``llmslo compare``) and ``compare_documents``;
- ``comparison``: one point or one capacity search against its baseline (``Comparison``,
  judged as ``Judging`` says);
- ``rows``: one metric's row, the rule (``RULE``) and how rows are shown;
- ``noise``: whether a change is run-to-run noise;
- ``tolerances``: how much worse each metric may get (``--slo-compare-fail``);
- ``baselines``: named baselines under ``.llmslo/baselines`` (``--slo-save``).

What two runs must share to be compared is the results document's
(``document.constants``); finding points and metric values in results is
``document.lookup``'s.
"""

from __future__ import annotations

from pytest_llmslo.document.lookup import capacity_point, find_capacity, find_point, metric_value
from pytest_llmslo.regression.comparison import (
    Comparison,
    Judging,
    assert_no_regression,
    compare_capacity,
    compare_points,
)
from pytest_llmslo.regression.documents import (
    DocumentComparison,
    Pairing,
    TestComparison,
    compare_documents,
    compare_test,
)
from pytest_llmslo.regression.noise import MIN_NOISE_SAMPLES, NoiseJudgement
from pytest_llmslo.regression.rows import (
    ROW_HEADERS,
    RULE,
    ComparisonRow,
    RowStatus,
    row_cells,
    status_text,
)

__all__ = [
    "MIN_NOISE_SAMPLES",
    "ROW_HEADERS",
    "RULE",
    "Comparison",
    "ComparisonRow",
    "DocumentComparison",
    "Judging",
    "NoiseJudgement",
    "Pairing",
    "RowStatus",
    "TestComparison",
    "assert_no_regression",
    "capacity_point",
    "compare_capacity",
    "compare_documents",
    "compare_points",
    "compare_test",
    "find_capacity",
    "find_point",
    "metric_value",
    "row_cells",
    "status_text",
]
