"""Server-side name search: case-insensitive substring or (case-sensitive) regular expression, paged.

All names of a graph are kept as one lower-case string joined by newlines, so a substring search is a C-speed
``str.find`` over one buffer (about 10 ms per million names) instead of a Python loop. A regular expression is
first narrowed by the longest literal it must contain, then checked name by name. Regular expressions are bounded
before they run: a length limit, no back-references, no nested unbounded repeats (the patterns that backtrack
exponentially), no counts that lay out more than 4096 characters (the engine expands a{100000000} as it compiles:
the server's whole memory), and each is matched against one name at a time (names are short). They run on the `regex`
package's engine, which takes a deadline and lets go of the GIL while it matches: what the checks cannot foresee
(`(.|.)*!` over names holding a `!`, `(.|.)*\\d$` over names not ending in a digit, which `re` ran for minutes
holding the GIL, every request of the server stalled) is a 400 after at most two seconds, other requests answered
meanwhile.
"""
import re
import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from typing import List, Optional, Tuple

import numpy as np
import regex

from tbprobe.tb_plugin.api_error import ApiError

try:  # Python 3.11 renamed the parser module; the old name warns.
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

__all__ = ["MAX_PATTERN", "NameSearch", "compile_pattern"]

MAX_PATTERN = 256
_CACHE_SIZE = 32
_LOOP_LIMIT = 20000
_EXPANDED_LIMIT = 4096   # characters a pattern may lay out, its repeats expanded (_expanded_size)
_REGEX_SECONDS = 2.0   # one search's time for a regular expression, all names together
# (POSSESSIVE_REPEAT and ATOMIC_GROUP: Python 3.11's `a{n}+` and `(?>...)`, which the regex engine expands too)
_REPEATS = tuple(getattr(sre_constants, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
                 if hasattr(sre_constants, n))
_GROUPS = tuple(getattr(sre_constants, n) for n in ("ATOMIC_GROUP",) if hasattr(sre_constants, n))
_MAXREPEAT = sre_constants.MAXREPEAT
_NO_NEWLINE_CATEGORIES = (sre_constants.CATEGORY_DIGIT, sre_constants.CATEGORY_WORD, sre_constants.CATEGORY_NOT_SPACE)


def compile_pattern(pattern: str) -> Tuple["regex.Pattern", str, bool]:
    """(compiled regex, a literal every match contains or '', whether it could match across
    names); 400 for a bad or risky pattern."""
    if len(pattern) > MAX_PATTERN:
        raise ApiError(400, f"search pattern longer than {MAX_PATTERN} characters")
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ApiError(400, f"bad regular expression: {exc}") from None
    _check_bounded(parsed, inside_repeat=False)   # before compiling, which is where a huge count costs
    try:
        re.compile(pattern)
        compiled = regex.compile(pattern, regex.VERSION0)
    except (re.error, regex.error, RecursionError, OverflowError) as exc:
        raise ApiError(400, f"bad regular expression: {exc}") from None
    except MemoryError:   # (what the checks above did not foresee: the request's, not the server's)
        raise ApiError(400, "regular expression too costly: it does not fit in memory") from None
    return compiled, _required_literal(parsed), _can_cross_lines(parsed, parsed.state.flags)


def _check_bounded(items, inside_repeat: bool) -> None:
    """400 for what backtracks exponentially (back-references, nested unbounded repeats) or takes memory in
    proportion to a count (see _expanded_size)."""
    if not inside_repeat and _expanded_size(items) > _EXPANDED_LIMIT:
        raise ApiError(400, f"regular expression too costly: its repeats ask for more than {_EXPANDED_LIMIT} "
                            "characters (no node name is that long)")
    for op, arg in items:
        if op in (sre_constants.GROUPREF, sre_constants.GROUPREF_EXISTS):
            raise ApiError(400, "regular expressions with back-references are not allowed in search")
        if op in _REPEATS:
            low, high, sub = arg
            unbounded = high == _MAXREPEAT or high > 1000
            if unbounded and inside_repeat:
                raise ApiError(400, "regular expression too costly: nested repeats such as (a+)+ are not allowed")
            _check_bounded(sub, inside_repeat or high > 1)
        elif op == sre_constants.SUBPATTERN:
            _check_bounded(arg[-1], inside_repeat)
        elif op == sre_constants.BRANCH:
            for branch in arg[1]:
                _check_bounded(branch, inside_repeat)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            _check_bounded(arg[1], inside_repeat)
        elif op in _GROUPS:
            _check_bounded(arg, inside_repeat)


def _expanded_size(items) -> int:
    """The pattern's items with each repeat counted its minimum number of times, branches added: what the regex
    engine lays out in memory as it compiles and matches (a{100000000} took the server's whole memory)."""
    size = 0
    for op, arg in items:
        if op in _REPEATS:
            size += max(arg[0], 1) * _expanded_size(arg[2])
        elif op == sre_constants.SUBPATTERN:
            size += _expanded_size(arg[-1])
        elif op == sre_constants.BRANCH:
            size += sum(_expanded_size(b) for b in arg[1])
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            size += _expanded_size(arg[1])
        elif op in _GROUPS:
            size += _expanded_size(arg)
        else:
            size += 1
        if size > _EXPANDED_LIMIT:   # (stop early: the product can be astronomically large)
            return size
    return size


def _required_literal(items) -> str:
    """The longest run of plain characters at the top level of the pattern (lower-cased), or ''."""
    best, run = "", ""
    for op, arg in items:
        if op == sre_constants.LITERAL:
            run += chr(arg)
            continue
        best, run = max(best, run, key=len), ""
    best = max(best, run, key=len)
    return best if "\n" not in best else ""


def _can_cross_lines(items, flags: int) -> bool:
    """True when some part of the pattern can match a newline or anchor to the whole text, so it cannot run
    over the joined names buffer (names never contain newlines)."""
    if flags & re.DOTALL:
        return True
    for op, arg in items:
        if op == sre_constants.LITERAL and arg == 10:
            return True
        if op == sre_constants.NOT_LITERAL and arg != 10:
            return True
        if op == sre_constants.IN:
            for iop, iarg in arg:
                if iop == sre_constants.NEGATE:
                    return True
                if iop == sre_constants.LITERAL and iarg == 10:
                    return True
                if iop == sre_constants.RANGE and iarg[0] <= 10 <= iarg[1]:
                    return True
                if iop == sre_constants.CATEGORY and iarg not in _NO_NEWLINE_CATEGORIES:
                    return True
        if op == sre_constants.AT and arg in (sre_constants.AT_BEGINNING_STRING, sre_constants.AT_END_STRING):
            return True
        if op in _REPEATS and _can_cross_lines(arg[2], flags):
            return True
        if op == sre_constants.SUBPATTERN:
            add_flags = arg[1] if len(arg) == 4 else 0
            if _can_cross_lines(arg[-1], flags | add_flags):
                return True
        if op == sre_constants.BRANCH and any(_can_cross_lines(b, flags) for b in arg[1]):
            return True
        if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT) and _can_cross_lines(arg[1], flags):
            return True
    return False


class NameSearch:
    """Search over a fixed list of names; results are node indexes in list order."""

    def __init__(self, names: List[str]):
        self._names = names
        joined = "\n".join(names) + "\n"
        lowered = joined.lower()
        if len(lowered) != len(joined):  # a few Unicode letters change length when lowered: do it name by name
            lowered = "\n".join(n.lower() for n in names) + "\n"
        self._text = lowered
        lengths = np.fromiter(map(len, names), dtype=np.int64, count=len(names)) + 1
        self._starts = (np.cumsum(lengths) - lengths).tolist()
        self._cache: "OrderedDict[Tuple[str, bool], Tuple[int, List[int]]]" = OrderedDict()
        self._raw: Optional[str] = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        # Pickled by index_cache: locks and per-query caches are not part of the index.
        state = dict(self.__dict__)
        for transient in ("_lock", "_cache", "_raw"):
            state.pop(transient, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._cache = OrderedDict()
        self._raw = None

    def find(self, query: str, regex: bool = False, want: int = 100) -> Tuple[int, List[int]]:
        """(number of matching names, indexes of the first ``want`` of them in list order)."""
        key = (query, regex)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and (len(hit[1]) >= want or len(hit[1]) == hit[0]):
                self._cache.move_to_end(key)
                return hit[0], hit[1][:want]
        result = self._regex(query, want) if regex else self._substring(query.lower(), want)
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return result[0], result[1][:want]

    def _line_of(self, pos: int) -> int:
        return bisect_right(self._starts, pos) - 1

    def _substring(self, needle: str, want: int) -> Tuple[int, List[int]]:
        if "\n" in needle:
            return 0, []
        if not needle:
            return len(self._names), list(range(min(want, len(self._names))))
        text = self._text
        total = text.count(needle)
        if total <= _LOOP_LIMIT:
            # Few hits: walk them line by line (exact, and the page comes out of the same walk).
            return self._walk(lambda start: _find_or_none(text, needle, start), None)
        # Many hits: exact count in C, occurrences minus the extra ones in names that hold the needle twice or more.
        repeated = re.compile(re.escape(needle) + "[^\\n]*" + re.escape(needle))
        for m in repeated.finditer(text):
            total -= m.group().count(needle) - 1
        _, items = self._walk(lambda start: _find_or_none(text, needle, start), want)
        return total, items

    def _walk(self, next_hit, want: Optional[int]) -> Tuple[int, List[int]]:
        """Visit matching lines in order: ``next_hit(start)`` gives the position of the next match at or after
        ``start`` (or None). Stops after ``want`` lines when given, else counts them all."""
        starts, n_lines = self._starts, len(self._starts)
        total, items = 0, []
        pos = next_hit(0)
        while pos is not None:
            line = bisect_right(starts, pos) - 1
            total += 1
            if want is None or len(items) < want:
                items.append(line)
            elif want is not None:
                break
            if line + 1 >= n_lines:
                break
            pos = next_hit(starts[line + 1])
        return total, items

    def _regex(self, pattern: str, want: int) -> Tuple[int, List[int]]:
        compiled, literal, cross = compile_pattern(pattern)
        deadline = time.monotonic() + _REGEX_SECONDS

        def left() -> float:
            # (checked here, not only by the engine: past the deadline each call got a millisecond of its own,
            # and a pattern quick on each name ran on over every name, 3.9 s in all on a large graph)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            return remaining

        try:
            if cross:
                # Rare patterns that could span names: check name by name, narrowed by a literal they must contain.
                found = [i for i, n in enumerate(self._names)
                         if (not literal or literal in n) and compiled.search(n, concurrent=True, timeout=left())]
                return len(found), found[:want]
            # Per-line semantics over the joined buffer (case-sensitive, as regular expressions usually are): ^ and
            # $ are line anchors and nothing can match a newline, so a match never spans two names.
            rx = regex.compile(pattern, regex.VERSION0 | regex.MULTILINE)
            raw = self._raw_text()

            def next_hit(start: int) -> Optional[int]:
                m = rx.search(raw, start, concurrent=True, timeout=left())
                return None if m is None else m.start()

            total, found = self._walk(next_hit, None)
        except TimeoutError:
            raise ApiError(400, f"regular expression too costly: it ran past {_REGEX_SECONDS:g} s "
                                "(simplify it, or search for a plain substring)") from None
        return total, found[:want]

    def _raw_text(self) -> str:
        with self._lock:
            if self._raw is None:
                self._raw = "\n".join(self._names) + "\n"
            return self._raw


def _find_or_none(text: str, needle: str, start: int) -> Optional[int]:
    pos = text.find(needle, start)
    return None if pos < 0 else pos
