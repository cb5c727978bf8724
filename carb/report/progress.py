"""Progress of a measuring campaign, on a terminal and in a log: ``progress=`` of every call that measures.

On a terminal it is a rich progress bar. Written to a file or a pipe (``nohup``, a batch
job, CI) rich draws nothing until the end, so a campaign of an hour printed nothing for an
hour; there the same progress is a plain line at most every ``every_s`` seconds and at each
quarter. Both count *visits* (a config measured ``rounds`` times at different moments is
``rounds`` visits), not finished configs: with the rounds spread over the whole campaign
no config finishes before the last round starts, so a count of configs stays at 0 for most
of the run and gives no time left.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["CampaignProgress", "campaign_progress", "fmt_duration"]


def fmt_duration(s: float) -> str:
    """``s`` seconds as ``1h02m``, ``4m05s`` or ``12s``."""
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"


class CampaignProgress:
    """The callbacks of :func:`carb.campaign.runner.run_campaign`, drawn as a bar on a terminal, as lines elsewhere.

    Use as a context manager; pass :attr:`callbacks` to ``run_campaign``.

    Args:
        console: where to write (stderr's console).
        what: the description, e.g. ``"measuring"``.
        store: the store's path, named when a campaign resumes.
        every_s: in a log, the most seconds between two lines.
        enabled: ``False`` draws nothing (e.g. ``--json`` output to a pipe).
        clock: the time source (seconds; tests give their own).
    """

    def __init__(
        self,
        console: Console,
        what: str = "measuring",
        *,
        store: str = "the store",
        every_s: float = 60.0,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console, self.what, self.store, self.every_s = console, what, store, every_s
        self.enabled, self.clock = enabled, clock
        self.tty = console.is_terminal
        self.planned: int | None = None
        self.done = self.failed = 0
        self.current = ""
        self._t0 = self._last = 0.0
        self._quarter = 0
        self._bar: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> "CampaignProgress":
        self._t0 = self._last = self.clock()
        if self.enabled and self.tty:
            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("visits"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[current]}"),
                TextColumn("[red]{task.fields[failed]}"),
                console=self.console,
                transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=None, current="", failed="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif self.enabled and self.planned and self.done and self.done < self.planned:
            self._line()  # where a log stops short of the end (an interrupt, an error)

    @property
    def callbacks(self) -> dict[str, Callable[..., None]]:
        """Keyword arguments for ``run_campaign``."""
        return {"on_start": self.on_start, "on_config": self.on_config, "on_visit": self.on_visit}

    def print(self, text: str) -> None:
        """A message above the bar (a plain line in a log)."""
        (self._bar.console if self._bar is not None else self.console).print(text, highlight=False, soft_wrap=True)

    # -- run_campaign's callbacks ----------------------------------------------------------

    def on_start(self, todo: int, skipped: int) -> None:
        """The campaign begins: ``todo`` configs to measure, ``skipped`` already in the store (a resumed one)."""
        if skipped and self.enabled:
            self.print(f"resuming: {skipped} of {todo + skipped} configs already in {self.store}")

    def on_config(self, cfg: Any) -> None:
        """A config's visit begins: shown as the current one."""
        self.current = cfg.label()
        if self._bar is not None:
            self._bar.update(self._task, current=self.current)

    def on_visit(self, cfg: Any, m: Any, planned: int) -> None:
        """A visit ended with measurement ``m`` (a failure is said at once), of ``planned`` visits in all."""
        self.planned = planned
        self.done += 1
        if m.status != "ok":
            self.failed += 1
            if self.enabled:
                self.print(
                    f"[red]{m.status}[/red] {cfg.label()}: {m.message}"
                    if self.tty
                    else f"{m.status} {cfg.label()}: {m.message}"
                )
        if self._bar is not None:
            self._bar.update(
                self._task, total=planned, completed=self.done, failed=f"{self.failed} failed" if self.failed else ""
            )
            return
        if not self.enabled:
            return
        now = self.clock()
        quarter = 4 * self.done // max(planned, 1)
        if now - self._last >= self.every_s or quarter > self._quarter or self.done == planned:
            self._quarter = quarter
            self._line(now)

    def line(self) -> str:
        """The plain progress line: visits done of planned, elapsed, time left."""
        elapsed = self.clock() - self._t0
        planned = self.planned or 0
        share = self.done / planned if planned else 0.0
        left = f", ~{fmt_duration(elapsed * (1 - share) / share)} left" if 0 < share < 1 else ""
        failed = f", {self.failed} failed" if self.failed else ""
        now = f", last: {self.current}" if self.current and self.done < planned else ""
        return (
            f"{self.what}: {self.done}/{planned} visits ({100 * share:.0f}%), {fmt_duration(elapsed)} elapsed"
            f"{left}{failed}{now}"
        )

    def _line(self, now: float | None = None) -> None:
        self._last = self.clock() if now is None else now
        self.console.print(self.line(), highlight=False, soft_wrap=True, markup=False)


@contextlib.contextmanager
def campaign_progress(what: str, store: str) -> Iterator[dict[str, Callable[..., None]]]:
    """A library measuring step's progress on stderr (:data:`carb.campaign.here.Progress`): a bar or lines.

    Example:
        >>> carb.calibrate("layers-cpu-avx2-1t", "here", progress=campaign_progress)  # doctest: +SKIP
    """
    with CampaignProgress(Console(stderr=True), what, store=store) as progress:
        yield progress.callbacks
