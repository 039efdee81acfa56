"""Diagnosis: evidence -> ranking -> verdict, phase and root cause, as the log shows them.

The steps, one module each:
- `analyzer`: one start as its lines arrive (timeline, catalogue hits, error records, when it was ready);
- `run`: the single pass over the input (lines -> starts -> an analyzer each), `diagnose` / `diagnose_lines`;
- `conclude`: per start, the windows (before / after ready), the phase that failed, the findings, the verdict;
- `windows`: a window's findings and root cause; `ranking`: which error started it and how it is named;
- `derive`: the numbers a finding shows; `evidence`: findings from their lines and the catalogue's texts;
- `checklist`: the stale-length checklist; `dsv4`: DeepSeek-V4 facts; `model`: the result dataclasses.

Nothing here plans a length or filters advice by the deployment: that is `dsv4ctl.advice`, which imports this.
"""

from dsv4ctl.diagnosis.model import ChecklistItem, Diagnosis, Evidence, Finding, PhaseBasis, StartSummary
from dsv4ctl.diagnosis.run import diagnose, diagnose_lines

__all__ = ["ChecklistItem", "Diagnosis", "Evidence", "Finding", "PhaseBasis", "StartSummary", "diagnose", "diagnose_lines"]
