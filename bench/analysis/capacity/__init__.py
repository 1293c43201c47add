"""The capacity under the SLO, in three parts: the statistics of one point (per-request samples, the
bootstrap interval of a p99, the judgement against the SLO, the run-to-run band from comparable
repeats: `stats`, re-exported here), the search over loads that narrows the capacity to a target
width (`search`), and one side's capacity read off its runs as an interval of output tok/s
(`interval`), which the verdict divides."""

from bench.analysis.capacity.stats import *  # noqa: F401,F403 - the statistics are this package's face
from bench.analysis.capacity.stats import _num, _r  # noqa: F401 - used by the report's tables
