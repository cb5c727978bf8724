"""Campaign progress in a log (not a terminal): plain lines that count visits (synthetic
measurements; no hardware)."""

import io

from rich.console import Console

from carb.campaign.runner import run_campaign
from carb.campaign.store import Store
from carb.cli import CampaignProgress, fmt_duration
from carb.families import space
from tests._helpers import SampledBackend


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_fmt_duration():
    assert [fmt_duration(s) for s in (0, 12.4, 65, 3600 + 125)] == ["0s", "12s", "1m05s", "1h02m"]


def test_a_log_gets_plain_lines_with_visits_and_time_left(tmp_path):
    out = io.StringIO()
    con = Console(file=out, force_terminal=False, width=200)
    clock = Clock()
    configs = list(space.load("tiny"))

    class Ticking(SampledBackend):
        def measure(self, config, protocol=None):
            clock.t += 10.0  # every visit takes 10 s of the fake clock
            return super().measure(config, protocol)

    with Store(tmp_path / "c.duckdb") as store, CampaignProgress(con, "measuring", every_s=60, clock=clock) as progress:
        run_campaign(configs, Ticking(), store, rounds=2, sentinel=None, **progress.callbacks)
    lines = out.getvalue().splitlines()
    # 16 visits of 10 s: a line at each quarter (4, 8, 12, 16 visits); 60 s never pass between them
    assert [ln.split(" visits")[0] for ln in lines] == [
        "measuring: 4/16",
        "measuring: 8/16",
        "measuring: 12/16",
        "measuring: 16/16",
    ]
    assert lines[0] == f"measuring: 4/16 visits (25%), 40s elapsed, ~2m00s left, last: {configs[3].label()}"
    assert lines[-1] == "measuring: 16/16 visits (100%), 2m40s elapsed"


def test_a_log_line_at_least_every_every_s_and_failures_said(tmp_path):
    out = io.StringIO()
    con = Console(file=out, force_terminal=False, width=200)
    clock = Clock()

    class Slow(SampledBackend):
        def measure(self, config, protocol=None):
            clock.t += 100.0
            return super().measure(config, protocol)

    configs = list(space.load("tiny"))[:2]
    with (
        Store(tmp_path / "c.duckdb") as store,
        CampaignProgress(con, "validating", every_s=60, clock=clock) as progress,
    ):
        run_campaign(configs, Slow(fail_on_visit=1), store, rounds=3, chunk=2, sentinel=None, **progress.callbacks)
    text = out.getvalue()
    assert text.count("timeout ") == 2 and "synthetic timeout" in text  # each failure on a line of its own
    progress_lines = [ln for ln in text.splitlines() if ln.startswith("validating:")]
    assert len(progress_lines) == 4  # every visit is 100 s > every_s apart
    assert progress_lines[-1].startswith("validating: 4/4 visits (100%)") and "2 failed" in progress_lines[-1]


def test_disabled_progress_prints_nothing(tmp_path):
    out = io.StringIO()
    with (
        Store(tmp_path / "c.duckdb") as store,
        CampaignProgress(Console(file=out, force_terminal=False), enabled=False) as progress,
    ):
        run_campaign(list(space.load("tiny")), SampledBackend(), store, rounds=2, sentinel=None, **progress.callbacks)
    assert out.getvalue() == ""
