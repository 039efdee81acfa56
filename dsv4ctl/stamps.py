"""A log line's own time, in every format dsv4ctl reads, as one value: `MM-DD HH:MM:SS`.

vLLM's record time has no year (vllm/logger.py `_DATE_FORMAT = "%m-%d %H:%M:%S"`), so no stamp keeps one: the
times of several logs compare as one year's. The formats, each searched in a line's first 400 characters, the
leftmost (the outermost wrapper's) winning:

- RFC 3339 / ISO 8601 at the line's start (`kubectl logs --timestamps`, `docker logs -t`, the CRI format,
  Python logging's `%(asctime)s`): `2026-11-03T10:20:41.123456789Z `, `2026-11-03 10:20:41,123 `;
- the same in brackets (SGLang's `[2026-11-03 10:20:41 TP0] `) and Ray's C++ records (ray==2.49.2
  src/ray/util/logging.cc: `[2026-11-03 10:20:41,123 E 858 901] `);
- glog's record (`E1103 10:20:41.123456  1234 file.cc:12] `, the date `MMDD`; torch.distributed's Python logger
  writes the same with a path, `W1103 14:20:11.402000 48190 site-packages/torch/distributed/run.py:982] `);
- c10's (torch==2.14.1 c10/util/Logging.cpp, glog-like, in brackets, often behind torch's rank prefix
  `[rank3]:`): `[E1103 10:20:41.123456789 ProcessGroupNCCL.cpp:632] `, the month not padded (`[E822 …`);
- vLLM's record `LEVEL MM-DD HH:MM:SS [file.py:N]` (also behind a process tag or any prefix).

A line with none has no time of its own: whoever needs one takes the last timed line's before it, never the
other way round. Standard library only: every part may use it (the bundle writer of `collect` included).
"""

from __future__ import annotations

import re

# The months' first day, counted from the year's start (a leap year: 02-29 is a day a log may show).
_DAYS_BEFORE = (0, 0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)

_TIME = r"(?P<{0}h>[01]\d|2[0-3]):(?P<{0}m>[0-5]\d):(?P<{0}s>[0-5]\d|60)"
_ISO_DATE = r"\d{{4}}-(?P<{0}mo>0[1-9]|1[0-2])-(?P<{0}d>[0-2]\d|3[01])"
_LINE_TIME = re.compile(
    # ISO 8601 first on the line, bare (the shippers' stamp, Python logging's asctime)
    r"(?P<iso>^\s*" + _ISO_DATE.format("i") + r"[T ]" + _TIME.format("i") + r"(?![\d:]))"
    # in brackets, where a prefix may stand before it (SGLang's, Ray's C++ records)
    r"|(?P<biso>(?:^|(?<=[\s)\]:|]))\[" + _ISO_DATE.format("b") + r"[T ]" + _TIME.format("b") + r"[.,\d]*[ \]Z+-])"
    # glog: level, MMDD, time with its fraction, the thread id, file:line]
    r"|(?P<glog>(?:^|(?<=[\s)\]:|]))[IWEF](?P<gmo>0[1-9]|1[0-2])(?P<gd>[0-2]\d|3[01]) "
    + _TIME.format("g") + r"\.\d+ +\d+ [\w./+-]+:\d+\])"
    # c10: [level MMDD time.fraction file:line], the month maybe unpadded
    r"|(?P<c10>(?:^|(?<=[\s)\]:|]))\[[IWEF](?P<cmo>0?[1-9]|1[0-2])(?P<cd>[0-2]\d|3[01]) "
    + _TIME.format("c") + r"(?:\.\d+)?(?: +\d+)? [\w.+-]+:\d+\])"
    # vLLM's record: LEVEL MM-DD HH:MM:SS
    r"|(?P<vllm>(?:^|(?<=[\s)\]|]))(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) +(?P<vmo>0[1-9]|1[0-2])-(?P<vd>[0-2]\d|3[01]) +"
    + _TIME.format("v") + r"(?![\d:]))"
)
_SEARCH_CHARS = 400
_CLOCK = re.compile(r"\d:[0-5]\d:[0-5]\d")
_CLOCK_BYTES = re.compile(rb"\d:[0-5]\d:[0-5]\d")
# A stamp starts at most this far before its clock (`CRITICAL 11-03 1` is 16 characters, `[2026-11-03T1` 13).
_LEAD = 40
_FIELDS = {"iso": "i", "biso": "b", "glog": "g", "c10": "c", "vllm": "v"}


def clock(month: int | str, day: int | str, time: str) -> str:
    """`MM-DD HH:MM:SS` from a month, a day and `HH:MM:SS`."""
    return f"{int(month):02d}-{int(day):02d} {time}"


def line_time(text: str) -> str | None:
    """The line's own time as `MM-DD HH:MM:SS`, or None when it carries none (see the module's formats)."""
    first = _CLOCK.search(text, 0, _SEARCH_CHARS)
    if first is None:  # no HH:MM:SS at all: most lines of a traceback, cheaply
        return None
    # every format starts at most _LEAD characters before its clock: the search begins there (leftmost wins)
    m = _LINE_TIME.search(text, max(0, first.start() - _LEAD), _SEARCH_CHARS)
    if m is None:
        return None
    key = _FIELDS[m.lastgroup or ""]  # the format's group closes last: it names the format
    return clock(m.group(key + "mo"), m.group(key + "d"),
                 f"{m.group(key + 'h')}:{m.group(key + 'm')}:{m.group(key + 's')}")


def line_time_of_bytes(raw: bytes) -> str | None:
    """`line_time` of an undecoded line (its first characters decoded only when they hold a clock)."""
    if _CLOCK_BYTES.search(raw, 0, _SEARCH_CHARS) is None:
        return None
    return line_time(raw[: _SEARCH_CHARS * 4].decode("utf-8", "replace"))


def from_iso(value: str | None) -> str | None:
    """An ISO 8601 time (a pod's `finishedAt`, a manifest's RFC 3339 stamp) as `MM-DD HH:MM:SS`; a stamp already
    in that form is returned as it is."""
    if not value:
        return None
    m = re.match(r"\s*\d{4}-(\d{2})-(\d{2})[T ](\d{2}:\d{2}:\d{2})", value)
    if m:
        return clock(m.group(1), m.group(2), m.group(3))
    return value if seconds(value) is not None else None


def seconds(stamp: str | None) -> int | None:
    """`MM-DD HH:MM:SS` as seconds since the start of a (leap) year; None for anything else. Differences are
    true across month ends; across a new year they are not (the stamp has no year)."""
    if not stamp or len(stamp) < 14 or stamp[2] != "-" or stamp[5] != " ":
        return None
    try:
        month, day = int(stamp[0:2]), int(stamp[3:5])
        h, m, s = int(stamp[6:8]), int(stamp[9:11]), int(stamp[12:14])
    except ValueError:
        return None
    if not 1 <= month <= 12:
        return None
    return ((_DAYS_BEFORE[month] + day) * 24 + h) * 3600 + m * 60 + s
