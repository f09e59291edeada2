"""One progress line for the long commands (backfill, demo): redrawn in place on a
terminal, one line per tenth of the way elsewhere (logs, pipes), so a log is not flooded."""
from __future__ import annotations

import sys
import time
from typing import TextIO


def bar(fraction: float, width: int = 30, label: str = "") -> str:
    """'[#####.....]  50.0 % label' for a fraction clipped to [0, 1]."""
    fraction = min(1.0, max(0.0, fraction))
    full = int(round(fraction * width))
    return f"[{'#' * full}{'.' * (width - full)}] {fraction * 100:5.1f} % {label}".rstrip()


class ProgressReporter:
    def __init__(self, out: TextIO = sys.stderr, enabled: bool = True, min_interval_s: float = 0.2):
        self.out, self.enabled, self.min_interval_s = out, enabled, min_interval_s
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self._last_draw = float("-inf")
        self._tenth = -1

    def show(self, fraction: float, label: str = "") -> None:
        if not self.enabled:
            return
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw >= self.min_interval_s:
                self._last_draw = now
                print("\r" + bar(fraction, label=label), end="", file=self.out, flush=True)
        elif (tenth := int(min(1.0, max(0.0, fraction)) * 10)) != self._tenth:
            self._tenth = tenth
            print(bar(fraction, label=label), file=self.out, flush=True)

    def done(self, fraction: float, label: str = "") -> None:
        """The last line, always drawn (and ended) where the reporter is enabled."""
        if self.enabled:
            print(("\r" if self.tty else "") + bar(fraction, label=label), file=self.out, flush=True)
