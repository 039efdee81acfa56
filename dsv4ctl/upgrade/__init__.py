"""The upgrade view: what changes for one launch between two vLLM releases.

    compare_releases(FitRequest(..., vllm_version="0.32.0"), "0.33.0") -> UpgradeView

The plan under each release (planning's `plan_fit`, once each: the KV sizing mode, the auto-fit and recommended
lengths, the utilization), then the tables dsv4ctl keeps per release: which runtime fixes each needs
(`fix_releases`), the launch's `vllm serve` flags removed, renamed or with new defaults and every flag added
(the catalogue's flags table), the vLLM messages that appear or vanish (the message index: counts, and those of
the model's family or the launch's flags), the startup log lines a scraper may miss (the catalogue's
`vllm_log_lines.json`), the startup-plan schema. A table that lacks a release says "not recorded".
Renderers: `dsv4ctl.render.upgrade` (Rich) and `UpgradeView.to_json` (schema_version).
"""

from dsv4ctl.upgrade.flags import LaunchFlag, launch_flags_of_argv, launch_flags_of_request
from dsv4ctl.upgrade.model import SCHEMA_VERSION, FixRow, ReleaseFit, UpgradeView
from dsv4ctl.upgrade.view import compare_releases

__all__ = ["SCHEMA_VERSION", "FixRow", "LaunchFlag", "ReleaseFit", "UpgradeView", "compare_releases",
           "launch_flags_of_argv", "launch_flags_of_request"]
