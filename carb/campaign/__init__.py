"""Running campaigns: configs visited in rounds on a backend, stored in DuckDB.

- :mod:`~carb.campaign.runner`: :class:`Campaign` and :func:`run_campaign`, the scheduler.
- :mod:`~carb.campaign.rounds`: the retake policy for visits timed in another machine state.
- :mod:`~carb.campaign.speed`: the speed index (paired sentinel) and drift corrections.
- :mod:`~carb.campaign.store`: the campaign store (DuckDB), resumable and crash-safe.
- :mod:`~carb.campaign.ray_executor`: the same campaign across the machines of a Ray cluster.
"""

from carb.campaign.runner import (CampaignResult, Executor, Job, LocalExecutor, platform_label, pool_rounds,
                                  read_config_file, retake_summary, run_campaign)
from carb.campaign.store import Store, StoreError

__all__ = ["CampaignResult", "Executor", "Job", "LocalExecutor", "run_campaign", "platform_label", "pool_rounds",
           "read_config_file", "retake_summary", "Store", "StoreError"]
