"""Answer extraction and answer checking (verifiers) for rewards and evaluation.

Parsers never raise: on anything odd (None, non-text, unbalanced braces) they return
None (or 0 for counts).

- ``normalize_answer``: SQuAD normalization -- lowercase, drop punctuation, drop the
  articles a/an/the, collapse whitespace.
- ``exact_match(pred, gold)``: normalized equality; gold may be a list of aliases.
- ``f1(pred, gold)``: SQuAD token-overlap F1 over normalized tokens (max over aliases).
- ``extract_boxed(text)``: content of the last complete ``\\boxed{...}`` (nested braces).
- ``extract_tag(text, tag)``: content of the last complete ``<tag>...</tag>``
  (case-insensitive, spaces inside the angle brackets tolerated).
- ``count_tags(text, tag)``: max(#opening, #closing) tags, as SSP's reference counts
  answer tags (more than 10 quarters the solver reward).
- ``mcq_letter(text)`` / ``mcq_match(pred, gold)``: multiple-choice letter A-J.
- ``plain_number(text)`` / ``same_number(a, b)``: an answer that is just a number, and the
  graders' number equality (relative 1e-6).
- ``number_value(text)`` / ``numbers_equal(pred, gold)``: a number or a fraction of whole numbers, and
  the numeric verdict every grader gives first (sign, decimal point, fractions, percent and thousands
  separators count: -3 != 3, 15 != 1.5, 1/2 != 12, 1,000 = 1000, 1/2 = 0.5, 50% = 50 = 0.5 * 100).
- ``math_equal(pred, gold)``: numbers compared as numbers first, then mathematical equivalence via
  ``math-verify``. math-verify
  (sympy) can hang or raise on strange input, and its own timeout uses SIGALRM, which
  only works in the main thread and would cancel an RQ job's alarm. So the check runs
  in a persistent helper process (this file run as a script) and the caller waits at
  most ``timeout`` seconds; a hung helper is killed and restarted on the next call.
  Any failure returns False, never an exception.

``VERIFIERS`` maps a config ``reward`` name to ``fn(pred, gold) -> bool``; ``SCORING`` names the
evaluation's scoring modes (trainer/evaluate.py) built on these checks.
"""

from __future__ import annotations

import atexit
import bisect
import functools
import json
import os
import re
import select
import string
import subprocess
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

__all__ = [
    "SCORING",
    "VERIFIERS",
    "count_tags",
    "exact_match",
    "extract_boxed",
    "extract_tag",
    "f1",
    "math_equal",
    "math_equal_many",
    "mcq_letter",
    "mcq_match",
    "normalize_answer",
    "number_value",
    "numbers_equal",
    "plain_number",
    "same_number",
]

Gold = str | Sequence[str]

# ------------------------------------------------------------------ normalization / EM / F1

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s) -> str:
    """SQuAD normalization: lowercase, strip punctuation and articles, squeeze spaces."""
    if s is None:
        return ""
    text = str(s).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(gold: Gold) -> list[str]:
    if gold is None:
        return []
    if isinstance(gold, str):
        return [gold]
    return [g for g in gold if isinstance(g, str)]


def exact_match(pred, gold: Gold) -> bool:
    """Normalized exact match against a gold answer or any of a list of aliases, numbers read as numbers.

    Two answers that are each one number (units after it allowed, ``plain_number``) match when the numbers
    are equal and the unit words match: "18.0" = "18", "1,000" = "1000". Otherwise the normalized texts must
    be equal *and* hold the same numbers, sign, decimal point and thousands separators read: the
    punctuation SQuAD's normalization drops no longer makes "-3" = "3", "1.5 million" = "15 million" or
    "1/2" = "12", and a leading minus sign counts ("-x" != "x")."""
    if pred is None:
        return False
    return any(_exact_one(pred, g) for g in _golds(gold))


# a number in running text: a sign only where it cannot be a minus between two terms ("5-3" is 5 and 3)
_TEXT_NUMBER = re.compile(r"(?:(?<![\w)\]}])[-+\u2212])?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<![\w.])[-+]?\.\d+")


def _numbers_in(text: str) -> list:
    """The numbers of a text, in order, as values ("1,000" -> 1000, "-3" -> -3, "1.5" -> 1.5)."""
    out = []
    for m in _TEXT_NUMBER.finditer(text):
        raw = m.group(0).replace(",", "").replace("\u2212", "-")
        out.append(int(raw) if _INTEGER.fullmatch(raw) else float(raw))
    return out


def _exact_one(pred, gold) -> bool:
    p, g = _read_number(str(pred)), _read_number(str(gold))
    if p is not None and g is not None:
        return _same_value(p[0], g[0]) and normalize_answer(p[2]) == normalize_answer(g[2])
    if normalize_answer(pred) != normalize_answer(gold):
        return False
    pn, gn = _numbers_in(str(pred)), _numbers_in(str(gold))
    if len(_SIGN.findall(str(pred))) != len(_SIGN.findall(str(gold))):  # "-x" != "x", "-\frac12" != "\frac12"
        return False
    return len(pn) == len(gn) and all(_same_value(a, b) for a, b in zip(pn, gn))


_SIGN = re.compile(r"(?<![\w)\]}])[-\u2212]")  # a minus sign, not a hyphen or a subtraction ("New-York", "5-3")


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(pred, gold: Gold) -> float:
    """SQuAD token F1 between normalized prediction and gold (max over aliases)."""
    if pred is None:
        return 0.0
    p = normalize_answer(pred).split()
    return max((_token_f1(p, normalize_answer(g).split()) for g in _golds(gold)), default=0.0)


# ------------------------------------------------------------------ parsers


_BRACE = re.compile(r"[{}]")


def _closing_brace(text: str, open_at: int, end: int) -> int | None:
    """Position of the '}' matching the '{' at ``open_at`` (nested braces counted), None if it is
    not closed before ``end``. A regex jumps from brace to brace, so a long text costs little."""
    depth = 0
    for m in _BRACE.finditer(text, open_at, end):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return m.start()
    return None


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_boxed(text) -> str | None:
    """Content of the last complete \\boxed{...} (or \\fbox{...}); None if there is none.

    Tried from the last box backwards. A box left open at ``a`` stays open to the end of the text,
    so an earlier box can only close before ``a``: each scan stops there, and the whole search
    reads the text once however many boxes are left open."""
    if not isinstance(text, str):
        return None
    end = len(text)
    for m in reversed(list(_BOXED.finditer(text))):
        close = _closing_brace(text, m.end() - 1, end)
        if close is not None:
            return text[m.end() : close].strip()
        end = m.end() - 1
    return None


def _tag_patterns(tag: str) -> tuple[re.Pattern, re.Pattern]:
    name = re.escape(tag.strip())
    return (
        re.compile(rf"<\s*{name}\s*>", re.IGNORECASE),
        re.compile(rf"<\s*/\s*{name}\s*>", re.IGNORECASE),
    )


def extract_tag(text, tag: str) -> str | None:
    """Content of the last complete <tag>...</tag>, stripped; None if there is none.

    A complete pair is an opening tag and the first closing tag after it; the last
    opening tag that has one wins, so ``<answer>a<answer>b</answer>`` gives ``b`` and
    ``<answer>x</answer> junk </answer>`` gives ``x``.
    """
    if not isinstance(text, str) or not isinstance(tag, str) or not tag.strip():
        return None
    opening, closing = _tag_patterns(tag)
    closes = list(closing.finditer(text))
    close_starts = [m.start() for m in closes]
    for o in reversed(list(opening.finditer(text))):
        j = bisect.bisect_left(close_starts, o.end())  # first close after this opening
        if j < len(closes):
            return text[o.end() : close_starts[j]].strip()
    return None


def count_tags(text, tag: str) -> int:
    """max(number of <tag>, number of </tag>) in text (0 for non-text)."""
    if not isinstance(text, str) or not isinstance(tag, str) or not tag.strip():
        return 0
    opening, closing = _tag_patterns(tag)
    return max(len(opening.findall(text)), len(closing.findall(text)))


# ------------------------------------------------------------------ multiple choice

_LETTERS = "ABCDEFGHIJ"
_MCQ_PATTERNS = [
    # "answer is (B)", "Answer: B", "the correct option is B."
    re.compile(r"(?i:answer|option|choice)\s*(?i:is)?\s*[:\-]?\s*\(?([A-J])\)?(?![A-Za-z])"),
    # leading "(B)", "B)", "B.", "B: Paris" (not "A cat ...")
    re.compile(r"^\(?([A-J])(?:\)|\.|:|$)"),
    # a lone "(B)" or "(b)" anywhere (last one wins)
    re.compile(r"\(([A-Ja-j])\)"),
]


def _letter_in(text: str) -> str | None:
    stripped = _TEXT_WRAPPER.sub(lambda m: m.group(1), text).strip().strip("*$`'\"")  # \text{B} is B
    if len(stripped) == 1 and stripped.upper() in _LETTERS:
        return stripped.upper()
    for pattern in _MCQ_PATTERNS:
        found = pattern.findall(stripped)
        if found:
            return found[-1].upper()
    return None


def mcq_letter(text) -> str | None:
    """The chosen option letter (A-J, upper case) in a prediction, or None.

    A \\boxed{...} answer is read first, then the whole text.
    """
    if not isinstance(text, str):
        return None
    boxed = extract_boxed(text)
    return (_letter_in(boxed) if boxed is not None else None) or _letter_in(text)


def mcq_match(pred, gold) -> bool:
    """The prediction's option letter equals the gold letter."""
    p, g = mcq_letter(pred), mcq_letter(gold)
    return p is not None and p == g


# ------------------------------------------------------------------ math equivalence

_DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox")


def _math_verify_equal(pred: str, gold: str) -> bool:
    """math-verify equivalence, no timeout (runs inside the helper process).

    A bare answer ("\\frac12", "x^2+1") is wrapped in $...$ so it is read as LaTeX;
    text with its own delimiters or \\boxed is parsed as it is.
    """
    from math_verify import verify

    g, p = _math_read(gold), _math_read(pred)
    return bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=None))


@functools.lru_cache(maxsize=4096)
def _math_read(s: str):
    """math-verify's parse of one answer (helper process). Cached: a task's gold answer and a
    repeated Reasoner answer are parsed once, not once per comparison (a sympy parse is most of
    a check's cost). verify() reads the parsed expressions without changing them."""
    from math_verify import parse

    s = s.replace("**", "^")  # Python's power (a Reasoner's "3*n**2"); LaTeX has no "**"
    if _DELIMITED.search(s):
        return parse(s, parsing_timeout=None)
    return parse(f"${s}$", parsing_timeout=None) or parse(s, parsing_timeout=None)


def _parent_path() -> str:
    """This process's sys.path as a PYTHONPATH value: "" (the working directory) as its absolute path; entries
    that are not paths, or that hold the separator, left out."""
    out = []
    for p in sys.path:
        if not isinstance(p, (str, os.PathLike)):
            continue
        p = os.path.abspath(os.fspath(p) or os.getcwd())
        if os.pathsep not in p:
            out.append(p)
    return os.pathsep.join(out)


class _MathWorker:
    """A helper process answering one JSON request per line; killed when it hangs."""

    STARTUP_TIMEOUT = 120.0

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        atexit.register(self.close)

    def _start(self) -> None:
        # The helper sees the packages this process sees: its sys.path as PYTHONPATH. (It once ran with -I, which
        # drops PYTHONPATH: where math-verify was installed on PYTHONPATH only, as on our GPU machines, the helper
        # never started and every answer that needed math-verify was graded wrong.) -P: the script's own folder,
        # trainer/, is not put first on its path. The parent's script folders (benchmarks/gpu for its scripts) do
        # come first, as in the parent; none holds a module named like one that math-verify imports.
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=_parent_path())
        self._proc = subprocess.Popen(
            [sys.executable, "-P", "-u", os.path.abspath(__file__), "--serve-math"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env, close_fds=True,
        )
        if self._readline(self.STARTUP_TIMEOUT) != "ready":
            self.close()
            raise RuntimeError("math-verify helper did not start (is the math-verify package installed?)")
        _HELPER_FAILED.clear()  # started: a later failure is said again

    def _readline(self, timeout: float) -> str | None:
        out = self._proc.stdout
        ready, _, _ = select.select([out], [], [], max(timeout, 0.0))
        if not ready:
            return None
        line = out.readline()
        return line.strip() if line else None

    def equal(self, pred: str, gold: str, timeout: float) -> bool | None:
        """math-verify's verdict, or None when the helper hung or died (no verdict: not cached)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                self._proc.stdin.write(json.dumps({"pred": pred, "gold": gold}) + "\n")
                self._proc.stdin.flush()
                answer = self._readline(timeout)
            except (OSError, ValueError):
                answer = None
            if answer is None:  # hung or died: kill it, the next call starts a fresh one
                self.close()
                return None
            return answer == "true"

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


_WORKER = _MathWorker()
MAX_MATH_CHARS = 2000
# math-verify's verdicts by (pred, gold): the Reasoner often gives one answer several times in a
# group, and each helper round trip costs a sympy parse and compare (milliseconds). A timed-out
# check has no verdict and is not kept (the next call asks again, as before).
_VERDICTS: dict[tuple[str, str], bool] = {}
MAX_VERDICTS = 65536
_HELPER_FAILED: list[str] = []  # the first reason the helper could not answer (warned once, until it starts)
_HELPER_LOCK = threading.Lock()


_TEXT_WRAPPER = re.compile(r"\\(?:textbf|text|mbox|mathrm|mathbf)\s*\{([^{}]*)\}")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_UNIT_WORDS = re.compile(r"\s*[A-Za-z][A-Za-z ]*")
# a fraction of two whole numbers: "1/2", "-3/4", "\frac{1}{2}", "\dfrac12", "-\tfrac{3}{4}"
_FRACTION = re.compile(r"([-+]?)\s*(?:(\d+)\s*/\s*(\d+)|\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d)))")
_PERCENT = re.compile(r"\\?%|\bper\s*cents?\b", re.IGNORECASE)


def _strip_markup(text: str) -> str:
    t = _TEXT_WRAPPER.sub(lambda m: " " + m.group(1) + " ", text).replace("\u2212", "-")
    for token in ("\\$", "$", "\\!", "\\,", "\\;", "\\left", "\\right", "{", "}"):
        t = t.replace(token, " ")
    return t.strip().rstrip(".").strip()


def _read_number(text) -> tuple[int | float, bool, str] | None:
    """(value, percent, unit words) of an answer that is one number, ``plain_number``'s reading; None otherwise.
    ``percent``: a % sign or the word "percent" follows the number."""
    if not isinstance(text, str) or len(text) > 80:
        return None
    t = _strip_markup(text)
    percent = bool(_PERCENT.search(t))
    t = _PERCENT.sub(" ", t).strip()
    match = _PLAIN_NUMBER.match(t)
    if match is None:
        return None
    rest = t[match.end():]
    if rest and not _UNIT_WORDS.fullmatch(rest):
        return None
    number = match.group(0).replace(",", "")
    try:
        return (int(number) if _INTEGER.fullmatch(number) else float(number)), percent, rest.strip()
    except ValueError:
        return None


def plain_number(text) -> float | int | None:
    """The value of an answer that is just a number: "18", "-3.5", "1,000", "$18", "\\$18.00", "50\\%",
    "18 \\text{ dollars}", "18 apples" (one number, unit words after it); None for anything else
    (fractions, expressions, several numbers), which math-verify reads instead. GSM8K answers are
    mostly plain numbers, and math-verify costs ~50 ms a call (sympy), most of a GRPO step's scoring."""
    read = _read_number(text)
    return None if read is None else read[0]


_INTEGER = re.compile(r"[-+]?\d+")


def number_value(text) -> tuple[int | float | Fraction, bool] | None:
    """(value, percent) of an answer that is one number or one fraction of whole numbers ("1/2",
    "\\frac{3}{4}", "-\\dfrac12" read exactly as Fractions); None for anything else (math-verify reads it)."""
    read = _read_number(text)
    if read is not None:
        return read[0], read[1]
    if not isinstance(text, str) or len(text) > 80:
        return None
    t = text.replace("\u2212", "-").replace("$", " ").replace("\\left", "").replace("\\right", "").strip()
    t = t.strip("()").strip().rstrip(".").strip()
    m = _FRACTION.fullmatch(t)
    if m is None:
        return None
    num, den = (int(x) for x in [m.group(2) or m.group(4) or m.group(5), m.group(3) or m.group(6) or m.group(7)])
    if den == 0:
        return None
    return (-1 if m.group(1) == "-" else 1) * Fraction(num, den), False


def same_number(pred: float | int, gold: float | int) -> bool:
    """The graders' number equality: two integers (as plain_number reads "1,000,001") exactly; otherwise within a
    relative 1e-6 of the gold (1e-6 absolute below 1). 2344000 != 2344001, and two 60-digit integers that share
    their first 7 digits are not equal; 18 == 18.0 and 0.1 + 0.2 == 0.3."""
    if isinstance(pred, int) and isinstance(gold, int):
        return pred == gold
    return abs(pred - gold) <= 1e-6 * max(1.0, abs(gold))


def _same_value(pred, gold) -> bool:
    """same_number, with Fractions: whole numbers and fractions exactly (1/2 = 2/4, 36/2 = 18), a decimal
    within same_number's tolerance."""
    if isinstance(pred, float) or isinstance(gold, float):
        return same_number(float(pred), float(gold))
    return pred == gold


def numbers_equal(pred, gold) -> bool | None:
    """The numeric verdict on two answers that are each one number or fraction (``number_value``); None when
    either is something else. Sign, decimal point, thousands separators and fractions count: -3 != 3,
    15 != 1.5, 1.25 != 12.5, 1/2 != 12, 1,000 = 1000, 1/2 = 0.5.

    Percent: a number written with % (or "percent") equals the same number without it, and also its fraction
    of one: "50%" = "50" (GSM8K golds write a percentage as the bare number) and "50%" = "0.5"; "50%" != "5"."""
    p, g = number_value(pred), number_value(gold)
    if p is None or g is None:
        return None
    (pv, p_pct), (gv, g_pct) = p, g
    if _same_value(pv, gv):
        return True
    if p_pct and _same_value(_hundredth(pv), gv):
        return True
    return bool(g_pct and _same_value(pv, _hundredth(gv)))


def _hundredth(x):
    return x / 100 if isinstance(x, float) else Fraction(x, 100)


_WORDS = re.compile(r"[^\W\d_]+(?:[\s,'\u2019-]+[^\W\d_]+)*[.!]?")  # "Paris", "The Hague", "true."
_SPACE = re.compile(r"\s+")


def _shortcut(pred, gold) -> bool | None:
    """math_equal's verdicts that need no sympy (None: math-verify decides). Numbers come first: two
    answers that are each a number or a fraction get the numeric verdict, whatever their text. Two answers
    of words only (no digits, no signs) match by ``exact_match`` ("Paris" = "paris.", "True" = "true");
    anything else matches textually only when equal but for spaces and surrounding $ (math-verify
    decides the rest: "-x" != "x" and "12,34" != "1234" are its to judge)."""
    if not isinstance(pred, str) or not isinstance(gold, str) or not pred.strip() or not gold.strip():
        return False
    numeric = numbers_equal(pred, gold)
    if numeric is not None:
        return numeric
    if _WORDS.fullmatch(pred.strip()) and _WORDS.fullmatch(gold.strip()):
        if normalize_answer(pred) and exact_match(pred, gold):
            return True
    elif _SPACE.sub("", pred).strip("$") == _SPACE.sub("", gold).strip("$"):
        return True
    if len(pred) > MAX_MATH_CHARS or len(gold) > MAX_MATH_CHARS:
        return False
    return _VERDICTS.get((pred, gold))


def _ask(worker: _MathWorker, pred: str, gold: str, timeout: float) -> bool:
    """One helper check; a verdict is remembered, a hang or an error is False and is not."""
    try:
        verdict = worker.equal(pred, gold, timeout)
    except Exception as exc:  # noqa: BLE001 -- a verifier must never take the run down, but says so
        with _HELPER_LOCK:
            first = not _HELPER_FAILED
            if first:
                _HELPER_FAILED.append(str(exc))
        if first:
            try:  # said once, never raised (warnings turned into errors included)
                warnings.warn(f"math_equal: {exc}; answers that need math-verify are graded wrong until it starts",
                              RuntimeWarning, stacklevel=2)
            except Exception:  # noqa: BLE001
                pass
        return False
    if verdict is not None:
        if len(_VERDICTS) >= MAX_VERDICTS:
            _VERDICTS.clear()
        _VERDICTS[(pred, gold)] = verdict
    return bool(verdict)


def math_equal(pred, gold, timeout: float = 5.0) -> bool:
    """True if pred is mathematically equivalent to gold; False on anything else.

    Normalized exact match short-cuts the check (so "Paris" == "paris" and "True" ==
    "true" hold without sympy), and so does a numeric comparison of two plain numbers.
    Inputs longer than MAX_MATH_CHARS are not parsed.
    """
    known = _shortcut(pred, gold)
    return known if known is not None else _ask(_WORKER, pred, gold, timeout)


def math_workers() -> int:
    """How many math-verify helper processes ``math_equal_many`` runs at once: SELFPLAY_MATH_WORKERS,
    else half the CPU cores, 1 to 8 (each helper holds sympy, about 100 MB)."""
    raw = os.environ.get("SELFPLAY_MATH_WORKERS", "")
    if raw.strip():
        try:
            return max(1, int(raw))
        except ValueError:  # a verifier never takes the run down: say so and use the default
            warnings.warn(f"SELFPLAY_MATH_WORKERS must be a whole number, got {raw!r}; using the default",
                          stacklevel=2)
    return max(1, min(8, (os.cpu_count() or 2) // 2))


_POOL: list[_MathWorker] = []  # extra helpers for math_equal_many; _WORKER is the first


def math_equal_many(pairs: Sequence[tuple], timeout: float = 5.0) -> list[bool]:
    """``[math_equal(pred, gold) for pred, gold in pairs]``, same verdicts, faster: the checks that
    need math-verify are asked once per distinct (pred, gold) and spread over ``math_workers()``
    helper processes at once (a sympy check takes milliseconds to tens of them; a SPICE step has
    hundreds). Each check keeps its own ``timeout``."""
    out = [_shortcut(p, g) for p, g in pairs]
    todo = list(dict.fromkeys((p, g) for (p, g), v in zip(pairs, out) if v is None))
    if todo:
        n = min(math_workers(), len(todo))
        while len(_POOL) < n - 1:
            _POOL.append(_MathWorker())
        workers = [_WORKER, *_POOL[: n - 1]]
        if n == 1:
            verdicts = {pair: _ask(_WORKER, *pair, timeout) for pair in todo}
        else:
            shares = [todo[i::n] for i in range(n)]

            def run(k: int) -> list[bool]:
                return [_ask(workers[k], p, g, timeout) for p, g in shares[k]]

            with ThreadPoolExecutor(n) as pool:  # each thread waits on its own helper (select releases the GIL)
                done = list(pool.map(run, range(n)))
            verdicts = {pair: v for k in range(n) for pair, v in zip(shares[k], done[k])}
        out = [verdicts[(p, g)] if v is None else v for (p, g), v in zip(pairs, out)]
    return [bool(v) for v in out]


def _serve_math() -> None:
    """Helper-process loop: one {"pred", "gold"} JSON per stdin line -> "true"/"false"."""
    import math_verify  # noqa: F401 -- import before announcing readiness

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            ok = _math_verify_equal(req["pred"], req["gold"])
        except Exception:  # noqa: BLE001
            ok = False
        sys.stdout.write("true\n" if ok else "false\n")
        sys.stdout.flush()


# ------------------------------------------------------------------ registry

Verifier = Callable[[str | None, Gold], bool]

VERIFIERS: dict[str, Verifier] = {
    "exact": exact_match,
    "math": math_equal,
    "mcq": mcq_match,
}

SCORING = ("math", "mcq", "exact", "f1", "judge")  # evaluation scoring modes (trainer/evaluate.py)


# ---- reading a model's answer the way GRPO's reward does -----------------------------------------

def final_answer(text: str) -> str | None:
    """The last boxed answer, else the last <answer> tag, else None."""
    return extract_boxed(text) or extract_tag(text, "answer")


# a text's numbers; the last one is its answer. Commas group thousands only ("1,000"; "18," is 18 and
# "1,2,3" three numbers); a minus right after a digit or a letter is subtraction ("10-3": 10 and 3)
LAST_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def _last_number_rule(found: str | None, gold: str, reward: str) -> bool:
    return found is None and reward == "math" and plain_number(gold) is not None


def compared_answer(text: str, gold: str, reward: str) -> str:
    """What ``score_answer`` compares with ``gold``: the final answer, else (the last-number rule)
    the text's last number ("" when it has none), else the whole text (math-verify and the MCQ
    parser then find the answer in it). The run page shows it next to the gold answer.

    >>> compared_answer("so 3 + 4 = 7 apples", "7", "math"), compared_answer("\\boxed{8}", "7", "math")
    ('7', '8')
    """
    found = final_answer(text)
    if _last_number_rule(found, gold, reward):
        numbers = LAST_NUMBER.findall(text)
        return numbers[-1] if numbers else ""
    return found if found is not None else text


def score_answer(text: str, gold: str, reward: str) -> float:
    """1.0 if ``text`` answers ``gold`` under the ``reward`` verifier, else 0.0 (GRPO's reward).

    Ours: with the math verifier, a numeric gold answer and no boxed/<answer> answer, the last
    number of the text is compared numerically (the usual GSM8K reading), instead of asking
    math-verify to parse the whole text (about 50 ms a call, most of a CPU step's scoring)."""
    answer = compared_answer(text, gold, reward)
    if _last_number_rule(final_answer(text), gold, reward):
        return float(bool(answer) and bool(numbers_equal(answer, gold)))
    return float(VERIFIERS[reward](answer, gold))


def score_answers(texts: Sequence[str], golds: Sequence[str], reward: str) -> list[float]:
    """``[score_answer(t, g, reward) for t, g in zip(texts, golds)]``, same scores; with the math
    verifier the math-verify checks of a whole step go to ``math_equal_many`` together."""
    if reward != "math":
        return [score_answer(t, g, reward) for t, g in zip(texts, golds)]
    out: list[float | None] = []
    pending = []  # (index, answer, gold)
    for i, (text, gold) in enumerate(zip(texts, golds)):
        if _last_number_rule(final_answer(text), gold, reward):
            out.append(score_answer(text, gold, reward))
        else:
            out.append(None)
            pending.append((i, compared_answer(text, gold, reward), gold))
    for (i, _, _), ok in zip(pending, math_equal_many([(a, g) for _, a, g in pending])):
        out[i] = float(ok)
    return out


if __name__ == "__main__" and sys.argv[1:] == ["--serve-math"]:
    _serve_math()
