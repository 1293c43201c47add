"""Runs sized by time: every measured run holds its load for at least `--window-s` seconds.

A run's request count depends on the device and the load, so each one is sized from a short burst
at its own load: the warm-up `vllm bench serve` before it (its own prompts, at the run's
concurrency) measures the server's request rate there, and the run gets enough requests to keep
that load for the window with a margin, and never fewer than MIN_REQUESTS (a p99 of fewer requests
is about their slowest one). Open-loop runs need no burst: at an offered rate the window is the
requests over the rate.

After a run, its steady window (the time during which at least 90 % of its `concurrency` requests
were in flight, from the per-request start times and latencies `--save-detailed` keeps; estimated
from the duration where they are missing: a client on a busy machine may lag a request or two
behind, and its turn-around between one request's end and the next one's start, up to REFILL_S,
is not a drop in load) must reach the window, and the run must have reached its concurrency at all; otherwise it
is not a measurement of that load (`window_problem`). A run that fell short is run again, sized
from what it held with a larger margin (`resize`); falling short is a sizing miss, not a failure, so
up to MAX_RESIZES such runs come on top of `--attempts` (`Tries`).
"""

from __future__ import annotations

import math
from typing import Any

from bench.analysis.results import _num  # noqa: F401 - the one reader's number rule

DEFAULT_WINDOW_S = 15.0
MIN_WINDOW_S = 5.0
MIN_REQUESTS = 100  # a p99 of fewer requests is about the slowest one
MARGIN = 1.4  # a burst's first wave runs slower than the steady state: aim above the window
RETRY_MARGIN = 1.6  # a run that fell short: the rate moved once, it may move again
# Runs that only fell short of their window, run again larger on top of `--attempts`: on a 2-core CI
# machine whose other tests came and went, a run at c=4 fell short twice (its second run sized from
# the first's held share with RETRY_MARGIN), and the search lost a concurrency it had measured fine.
MAX_RESIZES = 2
HELD_SHARE = 0.9  # the share of its concurrency a run must keep in flight to count as holding it
MAX_REQUESTS = 20000
# a closed-loop client's turn-around: the gap between one request's end and the next one's start.
# On a busy 2-core machine serving 2-token requests it was as long as the requests themselves
# (496 requests of about 9 ms in 9.0 s "held" c=1 for 4.6 s); a longer dip is a client that fell behind.
REFILL_S = 0.05


def burst_requests(concurrency: int) -> int:
    """The warm-up burst at a concurrency: two waves, at least 8 requests, at most 256."""
    return max(8, min(256, 2 * concurrency))


def burst_rate(raw: dict[str, Any], concurrency: int) -> float | None:
    """A burst's request rate after its first wave: the requests that ended after the first
    `concurrency` of them, over the time since (the first wave starts together and ends together, so
    its own rate reads low: on an H200 the 31B model's 32-request burst at c=16 read 4.4 req/s over
    its whole duration, where the run then held 7.8); the whole burst's rate without per-request detail."""
    starts, lat = raw.get("start_times"), _latencies(raw)
    if isinstance(starts, list) and lat is not None and len(starts) == len(lat) > concurrency:
        try:
            ends = sorted(float(s) + float(l) for s, l in zip(starts, lat))
        except (TypeError, ValueError):
            ends = []
        if ends and ends[-1] > ends[concurrency - 1]:
            return (len(ends) - concurrency) / (ends[-1] - ends[concurrency - 1])
    n, duration = _num(raw.get("completed")), _num(raw.get("duration"))
    return n / duration if n and duration else None


def rate_for(burst_req_s: float | None, measured: dict[int, float], concurrency: int) -> float | None:
    """The request rate to size a run with: the burst's, and no lower than a lighter load of the same
    scenario already ran (a server serves at least as many requests a second at a higher concurrency)."""
    lighter = [r for c, r in measured.items() if c <= concurrency and r and r > 0]
    best = max(lighter, default=None)
    if burst_req_s and best:
        return max(burst_req_s, best)
    return burst_req_s or best


def closed_loop_requests(req_s: float | None, concurrency: int, window_s: float, *, margin: float = MARGIN,
                         floor: int = MIN_REQUESTS) -> int:
    """Requests for a closed-loop run: `window_s` x `margin` at the burst's rate plus the last wave
    (which drains after the steady window), at least `floor` and two waves. Without a rate (the burst
    failed) 4 requests per second per slot are assumed."""
    rate = req_s if req_s and req_s > 0 else 4.0 * concurrency
    wanted = math.ceil(window_s * margin * rate) + concurrency
    return whole_waves(max(floor, 2 * concurrency, wanted), concurrency)


def whole_waves(requests: int, concurrency: int) -> int:
    """`requests` rounded up to whole waves of `concurrency` (down where that passes MAX_REQUESTS; a closed-loop
    run sized again after falling short gets its waves in bench.run.grid.whole_prefixes). Requests of
    one length in a closed loop run in lockstep waves, and the run's throughput is taken over its whole
    duration: a last wave of a few requests adds nearly a wave's time and few tokens (on the H100, 258
    requests at c=32 made 8 waves and a ninth of 2, and read 1,267 tok/s where 254 in 8 read 1,367)."""
    waves = math.ceil(requests / concurrency)
    if waves * concurrency > MAX_REQUESTS:
        waves = max(1, MAX_REQUESTS // concurrency)
    return int(waves * concurrency)


def open_loop_requests(rate: float, window_s: float, *, margin: float = 1.1, floor: int = MIN_REQUESTS) -> int:
    """Requests for an open-loop run at `rate` req/s: the window's worth of arrivals, at least `floor`."""
    return int(min(MAX_REQUESTS, max(floor, math.ceil(window_s * margin * rate))))


def _latencies(raw: dict[str, Any]) -> list[float] | None:
    """Per-request latencies (s): vLLM's `latencies` where written (0.32), else TTFT + the ITLs."""
    lat = raw.get("latencies")
    if isinstance(lat, list) and lat:
        try:
            return [float(v) for v in lat]
        except (TypeError, ValueError):
            return None
    ttfts, itls = raw.get("ttfts"), raw.get("itls")
    if isinstance(ttfts, list) and isinstance(itls, list) and len(ttfts) == len(itls) and ttfts:
        try:
            return [float(t) + sum(float(g) for g in (gaps or [])) for t, gaps in zip(ttfts, itls)]
        except (TypeError, ValueError):
            return None
    return None


def held_at(concurrency: int) -> int:
    """The fewest requests in flight that still count as holding a concurrency."""
    return max(1, math.ceil(HELD_SHARE * concurrency - 1e-9))


def in_flight(raw: dict[str, Any]) -> tuple[int, float] | None:
    """(the most requests in flight at once, seconds with at least `held_at(concurrency)` of them in
    flight, dips of at most REFILL_S between two such stretches included), from per-request start
    times and latencies; None without that detail."""
    starts, lat = raw.get("start_times"), _latencies(raw)
    if not isinstance(starts, list) or lat is None or len(starts) != len(lat) or not starts:
        return None
    try:
        events = sorted([(float(s), 1) for s in starts] + [(float(s) + l, -1) for s, l in zip(starts, lat)],
                        key=lambda e: (e[0], e[1]))
    except (TypeError, ValueError):
        return None
    wanted = _num(raw.get("max_concurrency"))
    wanted = held_at(int(wanted)) if wanted else None
    depth, top, full = 0, 0, 0.0
    since: float | None = None  # the start of the stretch now held
    dropped: float | None = None  # when the last held stretch ended
    for t, step in events:
        before = depth
        depth += step
        top = max(top, depth)
        if wanted is None:
            continue
        if before < wanted <= depth:
            if dropped is not None and t - dropped <= REFILL_S:
                full += t - dropped  # the client's turn-around: the load never left
            since = t
        elif depth < wanted <= before and since is not None:
            full += t - since
            since, dropped = None, t
    return top, full


def steady_window(raw: dict[str, Any], concurrency: int) -> float | None:
    """Seconds the run held its concurrency: from the detail, else the duration less one wave's
    share (a closed loop's last wave drains below its concurrency); None without a duration."""
    flight = in_flight(raw)
    if flight is not None and _num(raw.get("max_concurrency")):
        return flight[1]
    duration, n = _num(raw.get("duration")), _num(raw.get("completed")) or _num(raw.get("num_prompts"))
    if duration is None or not n:
        return None
    return duration * max(0.0, n - concurrency) / n


def reached(raw: dict[str, Any]) -> int | None:
    """The most requests in flight at once, from the detail (vLLM's own `max_concurrent_requests`
    counts something else: 165 for a run capped at 32); None without it."""
    flight = in_flight(raw)
    return flight[0] if flight else None


def window_problem(raw: dict[str, Any], concurrency: int, window_s: float) -> str | None:
    """Why a closed-loop run is not a measurement of its concurrency for this window, in a sentence;
    None when it is."""
    top = reached(raw)
    if top is not None and top < concurrency:
        return (f"the run never had {concurrency} requests in flight (at most {top}), so it is not a "
                f"measurement of concurrency {concurrency}")
    held = steady_window(raw, concurrency)
    if held is not None and held + 1e-9 < window_s:
        return (f"it held concurrency {concurrency} (at least {held_at(concurrency)} requests in flight) for "
                f"{held:.1f} s, less than the {window_s:g} s window: the server ran faster than its burst said, "
                "so the run is repeated with more requests")
    return None


def resize(requests: int, held_s: float | None, window_s: float, concurrency: int) -> int:
    """A run that fell short of its window, sized again from what it held (each time from the last
    such run: its share held is the freshest word on the load)."""
    if not held_s or held_s <= 0:
        return min(MAX_REQUESTS, 2 * requests)
    return int(min(MAX_REQUESTS, max(requests + concurrency, math.ceil(requests * window_s * RETRY_MARGIN / held_s))))


class Tries:
    """How often one run is tried: until it comes back valid, `attempts` times for runs that failed
    (errors, a crash, a suspect result), and on top of those up to MAX_RESIZES runs that only fell
    short of their window, each sized again from what the last one held (`shorts`: how many fell short)."""

    def __init__(self, attempts: int):
        self.attempts, self.failed, self.shorts = attempts, 0, 0

    def last_failure(self) -> bool:
        """Whether a failure now would be the last one allowed."""
        return self.failed + 1 >= self.attempts

    def another(self, *, short: bool) -> bool:
        """After a run that was not kept as valid: count it, and say whether to run it again."""
        self.shorts += bool(short)
        if short and self.shorts <= MAX_RESIZES:
            return True
        self.failed += 1
        return self.failed < self.attempts
