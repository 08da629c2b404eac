# vlrl's built-in rewards, ported from its TypeScript (src/rewards: normalize.ts, format.ts,
# correctness.ts, boxed.ts) so that a run exported with `export-trl` scores completions exactly as
# the app does. Standard library only. The functions TRL calls are generated into rewards.py;
# this module holds the rules they share. JavaScript's string semantics are kept where Python's
# differ: whitespace is ECMAScript's set, \d and \w are ASCII, `$` is the end of the text, and
# lengths count UTF-16 code units.
import math
import re

# ECMAScript's WhiteSpace and LineTerminator characters (String.prototype.trim and \s).
_JS_WS_CHARS = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_WS = "[" + re.escape(_JS_WS_CHARS) + "]"
_D = "[0-9]"
_W = "[A-Za-z0-9_]"


def _trim(s):
    return s.strip(_JS_WS_CHARS)


def _js_length(s):
    return len(s.encode("utf-16-le")) // 2


# ---- extraction -------------------------------------------------------------------------------


def extract_tagged(text, tag):
    """Every non-overlapping <tag>...</tag> body, shortest match first."""
    open_, close = "<%s>" % tag, "</%s>" % tag
    out = []
    start_from = 0
    while True:
        start = text.find(open_, start_from)
        if start < 0:
            return out
        end = text.find(close, start + len(open_))
        if end < 0:
            return out
        out.append(text[start + len(open_):end])
        start_from = end + len(close)


def last_boxed(text):
    """The content of the last \\boxed{...} (balanced braces), or of '\\boxed x' up to $ or a line end."""
    at = text.rfind("\\boxed")
    if at < 0:
        return None
    i = at + len("\\boxed")
    if i >= len(text) or text[i] != "{":
        if i >= len(text) or text[i] != " ":
            return None
        rest = text[i + 1:]
        m = re.search(r"[$\n]", rest)
        value = _trim(rest if m is None else rest[:m.start()])
        return None if value == "" else value
    depth = 0
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[at + len("\\boxed{"):i]
        i += 1
    return None


# ---- normalisation ----------------------------------------------------------------------------

_UNIT_WORDS = [
    "mm", "cm", "dm", "m", "km", "in", "inch", "inches", "ft", "foot", "feet", "yd", "yard", "yards",
    "mi", "mile", "miles", "meter", "meters", "metre", "metres", "centimeter", "centimeters",
    "millimeter", "millimeters", "kilometer", "kilometers", "unit", "units", "sq", "square", "cubic",
    "degree", "degrees", "deg", "rad", "radians", "g", "kg", "mg", "lb", "lbs", "l", "ml", "s", "sec",
    "seconds", "min", "minutes", "h", "hr", "hours", "mph", "kmh", "dollars", "cents", "years", "days",
]
_UNIT_AFTER_NUMBER = re.compile(
    r"([0-9}.])" + _WS + r"*(?:" + "|".join(_UNIT_WORDS) + r")(?:" + _WS + r"*(?:\^\{?[23]\}?|[²³]))?\Z",
    re.IGNORECASE,
)
_WORD_AFTER_SPACE = re.compile(
    r"([0-9}])" + _WS + r"+[A-Za-zµ]+(?:" + _WS + r"*/" + _WS + r"*[A-Za-z]+)?(?:" + _WS + r"*(?:\^\{?[23]\}?|[²³]))?\Z"
)
_NOT_WORD_BEFORE = r"(?<![A-Za-z0-9_])"


def normalize_answer(raw):
    """(text, percent): the normalised answer text, and whether it carried a percent sign."""
    s = _trim(re.sub(r"\r?\n", " ", raw))
    s = _trim(re.sub(r"\\\(|\\\)|\\\[|\\\]", "", re.sub(r"\\?\$", "", s)))
    s = _trim(re.sub(r"\.+\Z", "", s))
    s = re.sub(r"\\[!,;: ]", " ", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\left|\\right", "", s)
    s = s.replace("\\{", "{").replace("\\}", "}")
    s = s.replace("\\displaystyle", "")
    s = re.sub(r"\^" + _WS + r"*\{" + _WS + r"*\\circ" + _WS + r"*\}|\^" + _WS + r"*\\circ|\\circ|°", "", s)
    no_text_unit = re.sub(_WS + r"*\\(?:text|mbox|mathrm)\{[^{}]*\}" + _WS + r"*\Z", "", s, count=1)
    if _trim(no_text_unit) != "":
        s = no_text_unit
    s = re.sub(r"\\(?:text|mbox|mathrm|textbf|mathbf)\{([^{}]*)\}", lambda m: m.group(1), s)
    percent = re.search(r"(?:%|" + _NOT_WORD_BEFORE + r"percent)" + _WS + r"*\Z", s, re.IGNORECASE) is not None
    s = _trim(re.sub(_WS + r"*" + _NOT_WORD_BEFORE + r"percent\Z", "", re.sub(r"\\?%", "", s), count=1, flags=re.IGNORECASE))
    for _ in range(2):
        s = _trim(_WORD_AFTER_SPACE.sub(lambda m: m.group(1), _UNIT_AFTER_NUMBER.sub(lambda m: m.group(1), s, count=1), count=1))
    eq = s.split("=")
    if len(eq) == 2 and _js_length(_trim(eq[0])) <= 2 and _trim(eq[1]) != "":
        s = eq[1]
    s = re.sub(_WS + "+", "", s)
    s = re.sub(r"\\sqrt(" + _W + ")", lambda m: "\\sqrt{" + m.group(1) + "}", s)
    s = re.sub(r"\\frac(" + _W + ")(" + _W + ")", lambda m: "\\frac{" + m.group(1) + "}{" + m.group(2) + "}", s)
    s = re.sub(r"\\frac(" + _W + r")\{", lambda m: "\\frac{" + m.group(1) + "}{", s)
    if re.fullmatch(r"-?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?", s):
        s = s.replace(",", "")
    s = s.replace("{,}", "")
    if s.startswith("."):
        s = "0" + s
    return s, percent


# ---- a small LaTeX arithmetic evaluator ---------------------------------------------------------


def _tokenize(s):
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        prev = out[-1] if out else None
        if c in "0123456789.":
            # After ^ a bare digit is a one-digit exponent, as in LaTeX.
            if prev is not None and prev == ("op", "^"):
                m = re.match(r"[0-9]", s[i:])
            else:
                m = re.match(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)", s[i:])
            if not m:
                return None
            out.append(("num", float(m.group(0))))
            i += len(m.group(0))
            continue
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+)", s[i:])
            if not m:
                return None
            name = m.group(1)
            i += len(m.group(0))
            if name in ("frac", "sqrt", "pi"):
                out.append(("cmd", name))
            elif name in ("cdot", "times"):
                out.append(("op", "*"))
            elif name == "div":
                out.append(("op", "/"))
            else:
                return None
            continue
        i += 1
        if c == "π":
            out.append(("cmd", "pi"))
        elif c in "×·*":
            out.append(("op", "*"))
        elif c in "÷/":
            out.append(("op", "/"))
        elif c in "+-^":
            out.append(("op", c))
        elif c == "−":
            out.append(("op", "-"))
        elif c == "(":
            out.append(("open", ")"))
        elif c == "{":
            out.append(("open", "}"))
        elif c in ")}":
            out.append(("close", c))
        elif c == "[":
            out.append(("lbracket", None))
        elif c == "]":
            out.append(("rbracket", None))
        elif c != " ":
            return None
    return out


_MAX_NESTING = 64


def _div(a, b):
    # IEEE division, as JavaScript's / (Python raises on a zero divisor).
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _pow(a, b):
    # JavaScript's Math.pow: NaN where the real power is undefined, ±Infinity on overflow.
    if math.isnan(b) or (abs(a) == 1 and math.isinf(b)):
        return math.nan
    try:
        return math.pow(a, b)
    except ValueError:
        if a == 0 and b < 0:
            return math.inf
        return math.nan
    except OverflowError:
        return math.inf if a > 0 or float(b).is_integer() and b % 2 == 0 else -math.inf


def _sqrt(a):
    return math.sqrt(a) if a >= 0 else math.nan


class _Evaluator:
    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def run(self):
        v = self.sum()
        return v if v is not None and self.pos == len(self.tokens) and math.isfinite(v) else None

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def sum(self):
        acc = self.product()
        t = self.peek()
        while acc is not None and t is not None and t[0] == "op" and t[1] in "+-":
            self.pos += 1
            rhs = self.product()
            if rhs is None:
                return None
            acc = acc + rhs if t[1] == "+" else acc - rhs
            t = self.peek()
        return acc

    def product(self):
        acc = self.unary()
        while acc is not None:
            t = self.peek()
            if t is not None and t[0] == "op" and t[1] in "*/":
                self.pos += 1
                rhs = self.unary()
                if rhs is None:
                    return None
                acc = acc * rhs if t[1] == "*" else _div(acc, rhs)
            elif t is not None and t[0] in ("num", "open", "cmd"):
                rhs = self.power()  # implicit product: 2\sqrt{3}, 3\pi, 2(4)
                if rhs is None:
                    return None
                acc = acc * rhs
            else:
                break
        return acc

    def unary(self):
        t = self.peek()
        if t is not None and t[0] == "op" and t[1] in "-+":
            self.pos += 1
            v = self.unary()
            return None if v is None else (-v if t[1] == "-" else v)
        return self.power()

    def power(self):
        base = self.primary()
        t = self.peek()
        if base is None or not (t is not None and t == ("op", "^")):
            return base
        self.pos += 1
        exp = self.unary()
        return None if exp is None else _pow(base, exp)

    def argument(self):
        t = self.peek()
        if t is not None and t == ("open", "}"):
            return self.primary()
        if t is not None and t[0] in ("num", "cmd"):
            return self.primary()
        return None

    def primary(self):
        if self.depth >= _MAX_NESTING:
            return None
        self.depth += 1
        value = self.atom()
        self.depth -= 1
        return value

    def atom(self):
        t = self.peek()
        if t is None:
            return None
        self.pos += 1
        kind = t[0]
        if kind == "num":
            return t[1]
        if kind == "open":
            v = self.sum()
            c = self.peek()
            if v is None or c is None or c[0] != "close" or c[1] != t[1]:
                return None
            self.pos += 1
            return v
        if kind == "cmd":
            if t[1] == "pi":
                return math.pi
            if t[1] == "frac":
                num = self.argument()
                den = None if num is None else self.argument()
                return None if num is None or den is None else _div(num, den)
            index = 2.0
            nxt = self.peek()
            if nxt is not None and nxt[0] == "lbracket":
                self.pos += 1
                n = self.sum()
                nxt = self.peek()
                if n is None or nxt is None or nxt[0] != "rbracket":
                    return None
                self.pos += 1
                index = n
            radicand = self.argument()
            if radicand is None:
                return None
            return _sqrt(radicand) if index == 2 else _pow(radicand, _div(1.0, index))
        return None


def eval_latex_number(text):
    """The value of a normalised answer written as LaTeX arithmetic, or None."""
    if text == "":
        return None
    tokens = _tokenize(text)
    if tokens is None:
        return None
    try:
        return _Evaluator(tokens).run()
    except RecursionError:  # a run of thousands of signs; JavaScript's deeper stack would still parse it
        return None


NUMERIC_RTOL = 1e-4


def close_enough(a, b):
    return a == b or abs(a - b) <= NUMERIC_RTOL * max(abs(a), abs(b))


def numeric_value(raw):
    """(value, percent) of an answer read as a number, or None."""
    text, percent = normalize_answer(raw)
    value = eval_latex_number(text)
    return None if value is None else (value, percent)


def numbers_match(a, b):
    as_ = [a[0], a[0] / 100] if a[1] else [a[0]]
    bs = [b[0], b[0] / 100] if b[1] else [b[0]]
    return any(close_enough(x, y) for x in as_ for y in bs)


def _split_top_level(s):
    parts = []
    depth = 0
    start = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


def answers_equal(pred_raw, gold_raw, depth=0):
    """Equal normalised text (case-insensitive), else equal numbers, else tuples part by part."""
    pred, pred_pct = normalize_answer(pred_raw)
    gold, gold_pct = normalize_answer(gold_raw)
    if pred == "" or gold == "":
        return False
    if pred.lower() == gold.lower():
        return True
    pv = eval_latex_number(pred)
    gv = eval_latex_number(gold)
    if pv is not None and gv is not None:
        return numbers_match((pv, pred_pct), (gv, gold_pct))
    pm = re.fullmatch(r"[(\[](.*)[)\]]", pred)
    gm = re.fullmatch(r"[(\[](.*)[)\]]", gold)
    if pm and gm and pred[0] == gold[0] and pred[-1] == gold[-1] and depth < _MAX_NESTING:
        pp = _split_top_level(pm.group(1))
        gp = _split_top_level(gm.group(1))
        return len(pp) > 1 and len(pp) == len(gp) and all(answers_equal(p, g, depth + 1) for p, g in zip(pp, gp))
    return False


# ---- the built-in rewards ---------------------------------------------------------------------

DEGENERATE_TOKEN = "addCriterion"
DEGENERATE_MIN_REPEATS = 8
DEGENERATE_MIN_SHARE = 0.5
DEGENERATE_PENALTY = -2
EXACT_MATCH_REWARD = 2.0
NUMERIC_MATCH_REWARD = 1.5


def is_degenerate(completion):
    """addCriterion 8+ times, or with the newlines at least half the text (and at least once)."""
    repeats = completion.count(DEGENERATE_TOKEN)
    if repeats == 0:
        return False
    if repeats >= DEGENERATE_MIN_REPEATS:
        return True
    newlines = completion.count("\n")
    return (repeats * len(DEGENERATE_TOKEN) + newlines) / _js_length(completion) >= DEGENERATE_MIN_SHARE


def format_score(completion):
    """+1 for exactly one <REASONING> block, +1 for exactly one <SOLUTION> block, -2 if degenerate."""
    reasoning = len(extract_tagged(completion, "REASONING"))
    solution = len(extract_tagged(completion, "SOLUTION"))
    return (1 if reasoning == 1 else 0) + (1 if solution == 1 else 0) + (DEGENERATE_PENALTY if is_degenerate(completion) else 0)


def correctness_score(completion, answer):
    """The one <SOLUTION> value vs gold: 2.0 exact, 1.5 numeric match, else 0."""
    blocks = extract_tagged(completion, "SOLUTION")
    if len(blocks) != 1:
        return 0.0
    value = _trim(blocks[0].replace("\n", ""))
    gold = _trim(answer)
    if value == gold:
        return EXACT_MATCH_REWARD
    v = numeric_value(value)
    g = numeric_value(gold)
    if v is not None and g is not None and numbers_match(v, g):
        return NUMERIC_MATCH_REWARD
    return 0.0


def boxed_score(completion, answer, reward_max_val=1.0, reward_min_val=0.0):
    """The last \\boxed{} vs gold (itself unboxed when boxed) after normalisation (geo3k)."""
    predicted = last_boxed(completion)
    if predicted is None:
        return reward_min_val
    gold = last_boxed(answer)
    if gold is None:
        gold = answer
    return reward_max_val if answers_equal(predicted, gold) else reward_min_val


def completion_text(completion):
    """TRL hands a completion as text, or (conversational prompts) as a list of messages."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        content = message.get("content", "")
        if isinstance(content, str):
            parts.append(content)
        else:
            parts.extend(p.get("text", "") for p in content if p.get("type") == "text")
    return "".join(parts)
