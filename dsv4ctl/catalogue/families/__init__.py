"""Families of failures: rules that answer an originating error from the message's own arguments.

A hand-written signature (catalogue/signatures*.py) names one message of one package. A family covers a class of
messages (a path that does not exist, a directory that cannot be written, a value over its limit, a number that
does not divide, a choice the release does not know, a package too old, the Hub refusing, a CUDA error code, …)
and says what to do with the values the message itself carries: the path, the limit and the flag that sets it,
the divisors that work. `dsv4ctl.diagnosis.answers` applies them to the root cause that no signature explained
(`indexed_error`, `unrecognized_error`), in the order below (specific classes before the general ones).

Each rule is a `Signature` (its `patterns` carry named groups for the message's arguments; `title`, `meaning` and
`actions` are templates over them and over what `answers` derives, e.g. `{serve_with}`: this launch's own command
with the one change made). `source` cites the file:line that prints the message and the public threads behind
the advice. A family rule is not matched line by line like the catalogue: only the error already found to be the
root cause is read against it, so a benign line can never become a finding through a family.
"""

from __future__ import annotations

from dsv4ctl.catalogue.families.cluster import FAMILIES as _CLUSTER
from dsv4ctl.catalogue.families.devices import FAMILIES as _DEVICES
from dsv4ctl.catalogue.families.files import FAMILIES as _FILES
from dsv4ctl.catalogue.families.hub import FAMILIES as _HUB
from dsv4ctl.catalogue.families.model import FAMILIES as _MODEL
from dsv4ctl.catalogue.families.packages import FAMILIES as _PACKAGES
from dsv4ctl.catalogue.families.values import FAMILIES as _VALUES
from dsv4ctl.catalogue.signature import Signature

# Specific classes first: a model/device/cluster rule knows more than a generic path or value rule.
FAMILIES: tuple[Signature, ...] = _MODEL + _DEVICES + _CLUSTER + _HUB + _PACKAGES + _FILES + _VALUES

# Which family each rule belongs to (for the JSON `details.family` and the docs' table).
FAMILY_OF: dict[str, str] = {
    **{s.id: "model, adapters and features" for s in _MODEL},
    **{s.id: "GPU, driver and accelerator" for s in _DEVICES},
    **{s.id: "distributed: NCCL, Ray, multi-node, containers" for s in _CLUSTER},
    **{s.id: "the Hub" for s in _HUB},
    **{s.id: "packages and builds" for s in _PACKAGES},
    **{s.id: "files and directories" for s in _FILES},
    **{s.id: "values: limits, divisors, choices" for s in _VALUES},
}

BY_ID: dict[str, Signature] = {s.id: s for s in FAMILIES}
