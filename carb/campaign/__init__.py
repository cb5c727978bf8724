"""Running campaigns: configs visited in rounds on a backend, stored in DuckDB.

- :mod:`~carb.campaign.runner`: :class:`Campaign` and :func:`run_campaign`, the scheduler.
- :mod:`~carb.campaign.characterization`: what ``carb characterize`` does: the configs, the backend, the campaign.
- :mod:`~carb.campaign.executor`: where the measurements run (this process, or a cluster's slots).
- :mod:`~carb.campaign.visits`: pooling a config's stored visits, and retaking those timed in another
  machine state.
- :mod:`~carb.campaign.rounds`: the machine's speed states and the retake policy on measured rows.
- :mod:`~carb.campaign.speed`: the speed index (paired sentinel) and drift corrections.
- :mod:`~carb.campaign.store`: the campaign store (DuckDB), resumable and crash-safe.
- :mod:`~carb.campaign.ray_executor`: the same campaign across the machines of a Ray cluster.
"""

from carb.campaign.characterization import Characterization, characterize, select_configs
from carb.campaign.executor import Executor, Job, LocalExecutor, platform_label
from carb.campaign.runner import Campaign, CampaignResult, read_config_file, run_campaign
from carb.campaign.store import Store, StoreError
from carb.campaign.visits import pool_rounds, retake_summary

__all__ = [
    "Campaign",
    "CampaignResult",
    "Characterization",
    "characterize",
    "Executor",
    "Job",
    "LocalExecutor",
    "run_campaign",
    "platform_label",
    "pool_rounds",
    "read_config_file",
    "retake_summary",
    "select_configs",
    "Store",
    "StoreError",
]
