"""``carb demo``: the whole product on this machine in a few minutes.

1. **Source model**: CARB is trained on a shipped, measured dataset (``cpu-1t``: this
   project's own CPU campaign).
2. **Characterize**: K configs of the ``cpu`` space, chosen by the active sampler (each
   precision's low-memory batch-1 corner, the largest batch, then spread over the cost),
   are measured on this machine (all numbers are measured here).
3. **Calibrate**: the source model is mapped to this machine from those K measurements
   (their latencies at the calibration's median speed, when each row carries its own
   paired speed sentinel); a config beyond the K's range is flagged and its interval widened.
4. **Screen**: the space is screened in two stages (source model, then the calibrated
   model) under budgets set from the calibrated predictions (the space's median latency
   and memory unless given).
5. **Validate**: the best-ranked shortlisted configs and a random control sample are
   measured, and the budget decisions are scored against those measurements. The speed
   sentinel (:mod:`carb.measure.sentinel`) is read while both calibration and validation
   are measured. Both phases are scored in one state of the machine, the faster of theirs:
   each visit timed in another state, as its paired sentinel shows, is measured again
   (:func:`carb.campaign.rounds.retake_off_state`), the calibration's after validation too, and the map
   is refitted when any of those come back. The demo says how much the machine's speed
   moved between the two (first, when that exceeds its chance variation) and scores the
   predictions against the raw validation latencies and against them corrected to the
   calibration's speed (the budget calls too: a config timed once at a slow moment can
   break a latency budget it meets at the speed the model was calibrated at). Beside
   them, the sitting's floor: the same kind of map fitted on the validated configs
   themselves.
6. **Report**: tables, a summary and PNG figures in the output folder.

The stages live in :mod:`carb.demo._run`; the settings in :mod:`carb.demo._settings`, the
scores and the lines said about them in :mod:`carb.demo._score`, the files written in
:mod:`carb.demo._outputs`, the checks made before any work in :mod:`carb.demo._checks`, the
summary as table rows in :mod:`carb.demo._summary`.
"""

from __future__ import annotations

from carb.demo._checks import check_demo
from carb.demo._outputs import draw_figures
from carb.demo._run import run_demo
from carb.demo._score import sitting_floor
from carb.demo._settings import DEMO_ROUNDS, DemoSettings, default_threads
from carb.demo._summary import summary_rows

__all__ = [
    "DEMO_ROUNDS",
    "DemoSettings",
    "check_demo",
    "default_threads",
    "draw_figures",
    "run_demo",
    "sitting_floor",
    "summary_rows",
]
