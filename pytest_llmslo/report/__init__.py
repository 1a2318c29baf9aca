"""Pure renderers of a session's results; nothing here writes to the terminal or imports
pytest.

- ``terminal``: sweep tables with the knee marked and the Pareto summary, as lines;
- ``junit``: flat ``llmslo.*`` properties for test cases and the suite;
- ``jsonio``: the versioned, reproducible JSON document, written atomically.
"""
