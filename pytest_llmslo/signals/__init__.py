"""Engine signals around an SLO verdict: the engines' own Prometheus metrics (and GPU
telemetry) scraped over each load level, mapped to common signals, and the rules that
say which of them explains a missed objective.

``names`` (each engine's metric names), ``exposition`` (one parsed scrape), ``level``
(``LevelSignals``: what a level's scrapes come to), ``gpu`` (NVML, DCGM), ``scraper``
(the thread that scrapes), ``attribution`` (why an objective failed).
"""

from .levelsignals import LevelSignals

__all__ = ["LevelSignals"]
