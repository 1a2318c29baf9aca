"""The run history: every session remembered (``store``, with its ``provenance``), runs
named by ``latest``, ``latest~N`` or id (``refs``), and the change points of a metric
across runs (``changepoint``, ``trend``)."""

from __future__ import annotations
