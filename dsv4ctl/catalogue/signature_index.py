"""Which catalogue signatures can match a message, in one pass over it.

Most lines the prefilter selects in a long serving log (request-time tracebacks, per-request ERROR
lines) match no signature, and trying ~150 patterns one by one costs more than everything else the
analysis does with a line. `SignatureIndex.candidates(message)` narrows them down:

- for a small log, every signature is simply tried (compiling one alternation costs about 50 ms);
- then with one `re` alternation of every pattern (named groups made plain, since names repeat);
- once a log has shown many selected lines (`HYPERSCAN_AFTER`), with a hyperscan database of the same
  patterns in prefilter mode (a superset where hyperscan cannot express a pattern exactly), which scans
  a message in about a microsecond. Compiling costs tens of milliseconds, so small logs never pay it.

Either way each candidate is then confirmed with its own `re` patterns (`Signature.match`), so the
findings are the same with or without hyperscan.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dsv4ctl.catalogue.signature import Signature

ALTERNATION_AFTER = 500  # selected lines before the one `re` alternation is worth compiling (about 50 ms)
HYPERSCAN_AFTER = 4000  # selected lines before the hyperscan database is worth compiling
_NAMED_GROUP = re.compile(r"[(][?]P<[A-Za-z_][A-Za-z0-9_]*>")


def plain(pattern: str) -> str:
    """The pattern with named groups made non-capturing (one alternation may not repeat a name)."""
    return _NAMED_GROUP.sub("(?:", pattern)


class SignatureIndex:
    def __init__(self, catalogue: Sequence[Signature]) -> None:
        self.catalogue = tuple(catalogue)
        self._any: re.Pattern[str] | None = None  # compiled at first use (tens of ms: not on --help)
        self._seen = 0
        self._db = None  # hyperscan database; False when it cannot be had
        self._owner: list[int] = []  # pattern id -> index of its signature
        self._always: tuple[Signature, ...] = ()  # signatures hyperscan could not take: always tried

    def candidates(self, message: str) -> Sequence[Signature]:
        self._seen += 1
        if self._db is None and self._seen > HYPERSCAN_AFTER:
            self._db = self._compile()
        if self._db:
            hits: set[int] = set()
            try:
                self._db.scan(message.encode("utf-8", "replace"), match_event_handler=lambda i, *_: hits.add(self._owner[i]))
            except Exception:  # noqa: BLE001 - a failing scan falls back to `re`, never loses a finding
                self._db = False
            else:
                return [self.catalogue[i] for i in sorted(hits)] + list(self._always) if hits else self._always
        if self._seen <= ALTERNATION_AFTER:
            return self.catalogue  # a small log: trying each signature costs less than compiling one alternation
        if self._any is None:
            self._any = re.compile("|".join(f"(?:{plain(p)})" for sig in self.catalogue for p in sig.patterns))
        return self.catalogue if self._any.search(message) else ()

    def _compile(self):
        try:
            import hyperscan
        except ImportError:
            return False
        flags = _FLAGS(hyperscan)
        owner = [index for index, sig in enumerate(self.catalogue) for _ in sig.patterns]
        exprs = [plain(p).encode("utf-8") for sig in self.catalogue for p in sig.patterns]
        db = _database(hyperscan, exprs, flags)
        always: list[Signature] = []
        if db is None:
            # Some pattern hyperscan cannot take: find which, and try those signatures with `re` always.
            keep = {i for i, e in enumerate(exprs) if _database(hyperscan, [e], flags) is not None}
            bad = {owner[i] for i in range(len(exprs)) if i not in keep}
            always = [self.catalogue[i] for i in sorted(bad)]
            kept = [i for i in keep if owner[i] not in bad]
            owner, exprs = [owner[i] for i in kept], [exprs[i] for i in kept]
            db = _database(hyperscan, exprs, flags) if exprs else None
            if db is None:
                return False
        self._owner = owner
        self._always = tuple(always)
        return db


def _database(hyperscan, exprs: list[bytes], flags: int):
    try:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=[flags] * len(exprs))
        return db
    except Exception:  # noqa: BLE001 - hyperscan's compile error: the caller decides
        return None


def _FLAGS(hyperscan) -> int:  # noqa: N802 - a constant of the imported module
    return hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_SINGLEMATCH | hyperscan.HS_FLAG_UTF8


class LineSorter:
    """Sorts a raw line into SKIP, ALERT or one of the request groups by the regex alternatives given for
    each (alert first, then the groups in order): a request line's kind is `REQUEST + the group's index`.
    Python's `re` decides; hyperscan (once `HYPERSCAN_AFTER` lines were sorted, when installed) only tells
    the lines nothing can match, most of them, in one pass. `sort_span` sorts all the selected lines of a
    read at once, with the same result."""

    SKIP, ALERT, REQUEST = 0, 2, 3

    def __init__(self, alert: Sequence[str], requests: Sequence[Sequence[str]]) -> None:
        self.alert = tuple(alert)
        self.groups = tuple(tuple(plain(p) for p in group) for group in requests)
        self.request = tuple(p for group in self.groups for p in group)
        self._alert_re = re.compile("|".join(self.alert))
        self._request_re = re.compile("|".join(f"(?:{p})" for p in self.request) or "(?!)")
        self._group_res = tuple(re.compile("|".join(f"(?:{p})" for p in group)) for group in self.groups)
        self._seen = 0
        self._db = None
        self._span_db = None

    @classmethod
    def is_request(cls, kind: int) -> bool:
        return kind >= cls.REQUEST

    def __getstate__(self) -> dict:
        # A spawned scanner gets the patterns; it compiles its own databases.
        return {**self.__dict__, "_db": None, "_span_db": None}

    def exact(self, raw: str) -> int:
        if self._alert_re.search(raw):
            return self.ALERT
        if self._request_re.search(raw):
            return self.REQUEST + next(i for i, rx in enumerate(self._group_res) if rx.search(raw))
        return self.SKIP

    def sort(self, raw: str) -> int:
        self._seen += 1
        if self._db is None and self._seen > HYPERSCAN_AFTER:
            self._db = self._compile()
        if self._db:
            found: list[int] = []
            try:
                self._db.scan(raw.encode("utf-8", "replace"), match_event_handler=lambda i, *_: found.append(i))
            except Exception:  # noqa: BLE001 - a failing scan falls back to `re`
                self._db = False
            else:
                if not found:
                    return self.SKIP  # prefilter mode never misses a match: nothing can match here
        return self.exact(raw)

    def sort_span(self, data: bytes, s0: int, e0: int, starts, ends):
        """The kinds (a numpy array) of the selected lines of data[s0:e0], given their offsets in `data` as numpy
        arrays (`starts` ascending; `ends`: the text capped as the scan caps it): one hyperscan pass over the
        span finds the lines anything may match, and only those are decoded and sorted with `re`; without
        hyperscan, `sort` for each."""
        import numpy as np  # a dense span is found with numpy: it is imported already

        def raw(k: int) -> str:
            return data[int(starts[k]):int(ends[k])].decode("utf-8", errors="replace")

        if self._span_db is None:
            self._span_db = self._compile(single=False)
        if not self._span_db:
            return np.array([self.sort(raw(k)) for k in range(len(starts))], dtype=np.int64)
        hits: list[int] = []
        try:
            self._span_db.scan(memoryview(data)[s0:e0], match_event_handler=lambda i, frm, to, *_: hits.append(s0 + to))
        except Exception:  # noqa: BLE001
            self._span_db = False
            return np.array([self.sort(raw(k)) for k in range(len(starts))], dtype=np.int64)
        kinds = np.zeros(len(starts), dtype=np.int64)
        if hits:
            # A match in a line that was not selected falls to the selected line before it: `re` decides.
            for k in np.unique(np.searchsorted(starts, np.asarray(hits, dtype=np.int64) - 1, side="right") - 1).tolist():
                if k >= 0:
                    kinds[k] = self.exact(raw(k))
        return kinds

    def _compile(self, single: bool = True):
        """The database of every pattern: for one line (each pattern reported once), or for a span (every match)."""
        try:
            import hyperscan
        except ImportError:
            return False
        exprs = [p.encode("utf-8") for p in self.alert + self.request]
        # A span holds many lines: `^` and `$` of a pattern are a line's ends (MULTILINE), as they are for one line.
        flags = _FLAGS(hyperscan) if single else (
            hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_UTF8 | hyperscan.HS_FLAG_MULTILINE)
        return _database(hyperscan, exprs, flags) or False
