"""docs/options.md is generated from the settings table, and current."""

from __future__ import annotations

from pathlib import Path

from pytest_llmslo import settings as S

DOC = Path(__file__).resolve().parents[1] / "docs" / "options.md"


def test_options_page_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == S.reference_markdown(), (
        "docs/options.md is stale: regenerate it with "
        "python -m pytest_llmslo.settings > docs/options.md"
    )


def test_options_page_names_every_option_on_every_surface() -> None:
    text = S.reference_markdown()
    for spec in S.SPECS:
        if spec.cli:
            assert f"### `{spec.option}" in text
            assert f"`llmslo run`: `{spec.cli}`" in text
            assert f"`{spec.ini}`" in text and f"`{spec.env}`" in text
            if spec.marker:
                assert f"@pytest.mark.slo({spec.marker}=...)" in text


def test_every_option_has_one_spelling_per_surface() -> None:
    flags = [f for spec in S.SPECS for f in {spec.cli, spec.option} if f]
    assert len(flags) == len(set(flags))
    assert all(f == "--slo" or f.startswith(S.OPTION_PREFIX) for s in S.SPECS if (f := s.option))
