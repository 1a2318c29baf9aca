"""Pure renderers of a session's results; nothing here writes to the terminal or imports
pytest.

- ``terminal``: sweep tables with the knee marked and the Pareto summary, as lines
  (``levellines``: the lines under a level's row, shared with the Markdown report);
- ``markdown``, ``svg``, ``csvexport``, ``html``: the report formats (``formats``: one
  entry each), each from a session's ``document.Results`` (``mdtable``: a Markdown table;
  ``mdcompare``: a document comparison in Markdown);
- ``junit``: flat ``llmslo.*`` properties for test cases and the suite.

The results document itself is ``document``'s.
"""
