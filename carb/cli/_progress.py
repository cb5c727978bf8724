"""Progress of a measuring campaign, on a terminal and in a log: :mod:`carb.report.progress`, for the commands."""

from __future__ import annotations

from carb.report.progress import CampaignProgress, campaign_progress, fmt_duration

__all__ = ["CampaignProgress", "campaign_progress", "fmt_duration"]
