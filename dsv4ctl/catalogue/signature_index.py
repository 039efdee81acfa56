"""Which catalogue signatures can match a message, in one pass over it.

Most lines the prefilter selects in a long serving log (request-time tracebacks, per-request ERROR
lines) match no signature, and trying ~150 patterns one by one costs more than everything else the
analysis does with a line. `SignatureIndex.candidates(message)` narrows them down:

- with the patterns' required text (`required_literals`: every line a pattern matches holds the longest
  literal run of one of its alternatives): one `re` alternation of those runs, plain text that compiles
  in a few milliseconds, tells the lines no signature can match; on a line it passes, only the signatures
  one of whose runs is in the message are tried (a signature whose every pattern is tried this way never
  needs its own regexes compiled);
- once a log has shown many selected lines (`HYPERSCAN_AFTER`), with a hyperscan database of the
  patterns in prefilter mode (a superset where hyperscan cannot express a pattern exactly), which scans
  a message in about a microsecond. Compiling costs tens of milliseconds, so small logs never pay it.

Either way each candidate is then confirmed with its own `re` patterns (`Signature.match`), so the
findings are the same with or without hyperscan.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from dsv4ctl import hs_cache, re_cache
from dsv4ctl.catalogue.signature import Signature

HYPERSCAN_AFTER = 4000  # selected lines before the hyperscan database is worth compiling
GATE_MIN = 4  # a pattern whose alternative holds no literal run this long is tried on every line
_NAMED_GROUP = re_cache.compile(r"[(][?]P<[A-Za-z_][A-Za-z0-9_]*>")


def plain(pattern: str) -> str:
    """The pattern with named groups made non-capturing (one alternation may not repeat a name)."""
    return _NAMED_GROUP.sub("(?:", pattern)


def _runs(items) -> list[str]:
    """The runs of literal characters in a parsed regex sequence."""
    from re import _constants as c  # noqa: PLC0415 - the regex parser's own constants

    out, cur = [], []
    for op, av in items:
        if op is c.LITERAL:
            cur.append(chr(av))
            continue
        if cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def _branches(items) -> list:
    """The alternatives of a parsed regex (a lone group or alternation at the top is opened)."""
    from re import _constants as c  # noqa: PLC0415

    items = list(items)
    while len(items) == 1 and items[0][0] in (c.SUBPATTERN, c.BRANCH):
        op, av = items[0]
        if op is c.BRANCH:
            return [b for alt in av[1] for b in _branches(alt)]
        items = list(av[3])
    return [items]


@lru_cache(maxsize=None)
@re_cache.kept
def required_literals(pattern: str) -> tuple[tuple[str, ...], ...]:
    """For each top-level alternative of `pattern`, its runs of literal text, longest first: every line the
    alternative matches holds each of them. A pattern that ignores case gives one alternative without runs
    (nothing is required literally). Cached: the prefilter and the signature index both ask, and the parse
    it takes is kept between runs (`re_cache.kept`)."""
    from re import _parser  # noqa: PLC0415

    parsed = _parser.parse(pattern)
    if parsed.state.flags & re.IGNORECASE:
        return ((),)
    return tuple(tuple(sorted(_runs(alt), key=len, reverse=True)) for alt in _branches(parsed))


@re_cache.kept
def trie_pattern(texts: tuple[str, ...]) -> str:
    """A pattern that matches where one of `texts` does, written as their trie (`ab(?:c|d)` for abc, abd):
    `re` then tries each next character once, where a flat alternation of 160 texts took 4x as long.
    Kept between runs (`re_cache.kept`): writing it out costs as much as compiling it."""
    trie: dict = {}
    for text in texts:
        node = trie
        for ch in text:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        ends = "" in node
        alts = [re.escape(ch) + emit(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 and not ends else "(?:" + "|".join(alts) + ")"
        return body + "?" if ends else body

    return emit(trie)


class SignatureIndex:
    def __init__(self, catalogue: Sequence[Signature]) -> None:
        self.catalogue = tuple(catalogue)
        self._gate: re.Pattern[str] | None = None  # built at first use (a few ms: not on --help)
        self._by_text: dict[str, tuple[int, ...]] = {}  # each gated signature's runs -> the signatures a run admits
        self._ungated: tuple[int, ...] = ()  # signatures tried on every line
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
        if self._gate is None:
            self._build_gate()
        if self._gate.search(message) is None:
            return [self.catalogue[i] for i in self._ungated]
        picked = set(self._ungated)
        by_text = self._by_text
        for text in [t for t in by_text if t in message]:  # each text tried once, whichever signatures it admits
            picked.update(by_text[text])
        return [self.catalogue[i] for i in sorted(picked)]

    def _build_gate(self) -> None:
        """Per signature, the longest literal run of each alternative of each pattern; a signature with an
        alternative that has none (or only a short one) is ungated."""
        words: list[tuple[int, tuple[str, ...]]] = []
        ungated: list[int] = []
        for i, sig in enumerate(self.catalogue):
            runs = [alt[0] if alt and len(alt[0]) >= GATE_MIN else None for p in sig.patterns for alt in required_literals(p)]
            if not runs or None in runs:
                ungated.append(i)
            else:
                words.append((i, tuple(dict.fromkeys(runs))))
        texts = sorted({r for _i, runs in words for r in runs}, key=lambda r: (-len(r), r))
        by_text: dict[str, list[int]] = {t: [] for t in texts}
        for i, runs in words:
            for r in runs:
                by_text[r].append(i)
        self._by_text = {t: tuple(ids) for t, ids in by_text.items()}
        self._ungated = tuple(ungated)
        self._gate = re_cache.compile(trie_pattern(tuple(texts)) if texts else "(?!)")

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


def _database(hyperscan, exprs: list[bytes], flags: int, name: str = "signatures"):
    """The database of `exprs`, kept between runs (`dsv4ctl.hs_cache`: compiling took ~0.1 s in every scanning
    process); None when hyperscan cannot compile it."""
    try:
        return hs_cache.database(hyperscan, name, exprs, flags)
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
        self._alert_re: re.Pattern[str] | None = None  # compiled at the first line sorted (a log that serves)
        self._request_re: re.Pattern[str] | None = None
        self._group_res: tuple[re.Pattern[str], ...] = ()
        self._seen = 0
        self._db = None
        self._span_db = None

    @classmethod
    def is_request(cls, kind: int) -> bool:
        return kind >= cls.REQUEST

    def __getstate__(self) -> dict:
        # A spawned scanner gets the patterns; it compiles its own databases.
        return {**self.__dict__, "_db": None, "_span_db": None}

    def _compile_re(self) -> None:
        self._alert_re = re_cache.compile("|".join(self.alert))
        self._request_re = re_cache.compile("|".join(f"(?:{p})" for p in self.request) or "(?!)")
        self._group_res = tuple(re_cache.compile("|".join(f"(?:{p})" for p in group)) for group in self.groups)

    def exact(self, raw: str) -> int:
        if self._alert_re is None:
            self._compile_re()
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
        return _database(hyperscan, exprs, flags, "serving-sorter" if single else "serving-spans") or False
