"""``python -m pytest_llmslo.settings > docs/options.md``: the options reference, generated
from the settings table (``helptext.reference_markdown``)."""

from __future__ import annotations

import sys

from .helptext import reference_markdown

sys.stdout.write(reference_markdown())
