"""Every vLLM process writes its Python stacks on a signal: `faulthandler.register(STACK_SIGNAL)`, to the process's
own stderr, every thread. Registered by the plugin's `register()` in each vLLM process (standard library only, never
raises), so that `serve --watchdog` and `check --dump` can show where each process stood where py-spy is not
installed (`dsv4ctl/check/dumps.py` sends the signal, to a process whose status shows it caught).

SIGUSR2: vLLM 0.27.1-0.34.0 install handlers for SIGINT, SIGTERM, SIGQUIT and SIGTSTP only (every
`signal.SIG…` in their sources). A handler already there (a Python one) is chained: it still runs after the dump.
`DSV4CTL_STACKS=off` leaves the signal alone.
"""

from __future__ import annotations

import os
import signal
import sys

STACK_SIGNAL = signal.SIGUSR2
STACKS_ENV = "DSV4CTL_STACKS"
_registered: list[int] = []  # the pid that registered (a forked child registers again: its own stderr)


def register_stack_signal() -> bool:
    """Register faulthandler for STACK_SIGNAL in this process, once; False when off or impossible."""
    if os.environ.get(STACKS_ENV, "").strip().lower() in ("off", "0", "no", "false"):
        return False
    if os.getpid() in _registered:
        return True
    try:
        import faulthandler

        stream = sys.__stderr__
        if stream is None:
            return False
        stream.fileno()  # faulthandler writes to the descriptor
        previous = signal.getsignal(STACK_SIGNAL)
        chain = previous not in (signal.SIG_DFL, signal.SIG_IGN, None)  # chaining the default would end the process
        faulthandler.register(STACK_SIGNAL, file=stream, all_threads=True, chain=chain)
    except (AttributeError, OSError, RuntimeError, ValueError):
        return False
    _registered.append(os.getpid())
    return True
