"""Progress where people look: a bar with ETA on a terminal, plain lines elsewhere.

On a terminal a tqdm bar (binary units: KiB, MiB, GiB, the same as the summaries). When the output
is not a terminal (CI logs, a Kubernetes Job's log, a file) a bar would be invisible or garbled, so a
plain line is printed at least every `interval` seconds, also while nothing moves:
`uploading: 1.2 GiB of 58.6 GiB (2%), 95.3 MiB/s, about 10 min left`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Progress:
    """Byte progress of one phase. `update(n)` is thread-safe; `close()` ends the bar or the lines."""

    def __init__(self, total: int, desc: str, *, stream: TextIO | None = None, bar: bool | None = None,
                 interval: float | None = None, enabled: bool = True):
        # VLLM_POC_PROGRESS_SECONDS shortens the line interval (tests); the default is 10 s.
        interval = interval or float(os.environ.get("VLLM_POC_PROGRESS_SECONDS") or 10)
        self.total, self.desc, self.interval = total, desc, interval
        self.stream = stream or sys.stderr
        self.done = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._bar = None
        self._thread = None
        if not enabled:
            return
        if bar if bar is not None else _isatty(self.stream):
            # tqdm only for a bar on a terminal: the Jobs' images need not have it for their lines.
            from tqdm import tqdm

            # unit "iB" with a 1024 divisor reads KiB, MiB, GiB; the counts get the same suffix.
            self._bar = tqdm(total=total, desc=desc, unit="iB", unit_scale=True, unit_divisor=1024,
                             file=self.stream, dynamic_ncols=True,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}iB/{total_fmt}iB "
                                        "[{elapsed}<{remaining}, {rate_fmt}]")
        else:
            self._thread = threading.Thread(target=self._tick, name=f"progress-{desc}", daemon=True)
            self._thread.start()

    def update(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.done / elapsed
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        left = ""
        if rate > 0 and self.total > self.done:
            left = f", about {human_seconds((self.total - self.done) / rate)} left"
        return (f"{self.desc}: {human_bytes(self.done)} of {human_bytes(self.total)}{pct}, "
                f"{human_bytes(rate)}/s{left}")

    def _tick(self) -> None:
        while not self._closed.wait(self.interval):
            self._print(self.line())

    def _print(self, text: str) -> None:
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        if self._bar is not None:
            self._bar.close()
        elif self._thread is not None:
            self._print(self.line())


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
