"""Progress of long fits: a rich progress bar on a terminal's stderr, plain lines otherwise.

Calibration and cross-validation report each residual evaluation with the current phase (the
fit, or the fold being left out) and the frontier median APE of the latest evaluation. Nothing
goes to stdout, so JSON output stays clean.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class Progress:
    """Silent progress (the base): subclasses draw or log."""

    def start(self, phase: str, total: int | None = None) -> None:
        """A new phase (e.g. ``fit`` or ``cv round: leave out v5.0``) of about ``total`` evaluations."""

    def advance(self, residual: float | None = None) -> None:
        """One residual evaluation done; ``residual`` is its frontier median APE, %."""

    def log(self, message: str) -> None:
        """A one-line message."""

    def close(self) -> None:
        """Finish drawing."""

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LineProgress(Progress):
    """Messages and phase starts as lines through ``say`` (e.g. to stderr); no per-evaluation lines."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say

    def start(self, phase: str, total: int | None = None) -> None:
        self.say(phase)

    def log(self, message: str) -> None:
        self.say(message)


class RichProgress(Progress):
    """A rich progress bar on stderr: phase, evaluations, residual median APE, elapsed time."""

    def __init__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as _P, TextColumn, TimeElapsedColumn

        self._p = _P(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                     TextColumn("median APE {task.fields[residual]}"), TimeElapsedColumn(),
                     console=Console(stderr=True), transient=False)
        self._p.start()
        self._task = None

    def start(self, phase: str, total: int | None = None) -> None:
        if self._task is not None:
            self._p.update(self._task, total=self._p.tasks[-1].completed)
        self._task = self._p.add_task(phase, total=total, residual="-")

    def advance(self, residual: float | None = None) -> None:
        if self._task is None:
            self.start("fit")
        task = self._p.tasks[-1]
        if task.total is not None and task.completed + 1 > task.total:
            self._p.update(self._task, total=task.completed + 1)
        fields = {"residual": f"{residual:.1f} %"} if residual is not None else {}
        self._p.update(self._task, advance=1, **fields)

    def log(self, message: str) -> None:
        self._p.console.log(message)

    def close(self) -> None:
        self._p.stop()


def for_stderr() -> Progress:
    """A bar when stderr is a terminal, else plain lines on stderr."""
    if sys.stderr.isatty():
        return RichProgress()
    return LineProgress(lambda m: print(m, file=sys.stderr, flush=True))


__all__ = ["Progress", "LineProgress", "RichProgress", "for_stderr"]
