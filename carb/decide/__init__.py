"""Deciding what to profile: budgets, two-stage screening, the Pareto front, validation.

- :mod:`~carb.decide.screen`: accept / reject / measure under budgets, Stage 1 and Stage 2.
- :mod:`~carb.decide.pareto`: objectives, the exact non-dominated filter, hypervolume.
- :mod:`~carb.decide.validate`: scoring decisions against measured truth.
- :mod:`~carb.decide.screening`: what a screening says and writes (hints, its folder, the shortlist as text).
- :mod:`~carb.decide.validation`: what ``carb validate`` does: a screening's calls scored here or on a dataset.
- :func:`calls`: the three-way budget calls (accept / reject / measure) of a table of predictions.
"""

from carb.decide._calls import calls
from carb.decide.validation import Screened, read_screen, validate_screen

__all__ = ["calls", "Screened", "read_screen", "validate_screen"]
