"""Where dsv4ctl keeps what it may rebuild: one rule for every cache (the hub's headers, the prefilter's
hyperscan database, the compiled regular expressions).

`$DSV4CTL_CACHE_DIR`, else `$XDG_CACHE_HOME/dsv4ctl`, else `~/.cache/dsv4ctl` (`~` expanded). A cache is
only ever a saving: whoever finds it missing, unreadable or unwritable builds what it holds instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from dsv4ctl.errors import OutputError
from dsv4ctl.files import write_whole

CACHE_DIR_ENV = "DSV4CTL_CACHE_DIR"


def write_file(path: Path, data: bytes) -> bool:
    """`data` into `path` whole or not at all (`dsv4ctl.files.write_whole`: a temporary file beside it, then a
    rename), its directory made; False (and no temporary file left) when it cannot be written: a cache that cannot
    be written is only slower."""
    try:
        write_whole(path, data, hint=None, make_parents=True, durable=False)
        return True
    except OutputError:
        return False


def cache_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """dsv4ctl's cache directory; None when neither variable is set and there is no home to put it in."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "dsv4ctl"
    home = os.path.expanduser("~")
    if home == "~":
        return None
    return Path(home) / ".cache" / "dsv4ctl"
