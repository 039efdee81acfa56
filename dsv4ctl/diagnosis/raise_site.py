"""An error the message index knows, answered from where it is raised: the condition that guards the statement (the
index's `check`), the values this start gave it (the message's own placeholders, the launch's flags), the flag that
sets each name, what passes where the condition states it, and what a helper the condition calls reads.

    answer = explain(entry, message, tl)   # None when the check says nothing this can read

The condition is parsed with `ast` (it is Python source as the index keeps it) and only simple shapes are turned into
instructions: a comparison of two values (`a <= b`), a divisibility (`a % b == 0`), a membership (`x in names`), a
value that must be set or unset. Anything else is quoted as it stands. Numbers come from the message (aligned with its
template) or from the launch's `non-default args`; nothing is assumed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.diagnosis.answers_common import arg, flag_for, serve_with
from dsv4ctl.logs.timeline import StartupTimeline
from dsv4ctl.units import read_number

_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_CHECK_RE = re.compile(r"^(assert|if)\s+(.*)$", re.DOTALL)


@dataclass
class Explanation:
    """What the raise site says of this error."""

    requires: str  # what must hold for the statement not to run, as source text
    values: dict[str, str] = field(default_factory=dict)  # name -> value this start gave it
    value_basis: dict[str, str] = field(default_factory=dict)  # name -> where the value comes from
    flags: dict[str, str] = field(default_factory=dict)  # name -> the vLLM flag that sets it
    passes: list[str] = field(default_factory=list)  # instructions that make the check pass
    helpers: list[tuple[str, str]] = field(default_factory=list)  # (name, its source's first line and citation)

    def sentence(self) -> str:
        here = ", ".join(f"{n} = {v} ({self.value_basis.get(n, 'the message')})" for n, v in self.values.items())
        flags = ", ".join(f"{n}: {f}" for n, f in self.flags.items())
        parts = [f"The check where it is raised requires `{self.requires}`."]
        if here:
            parts.append(f"This start gave it {here}.")
        if flags:
            parts.append(f"The flags that set them: {flags}.")
        for name, text in self.helpers:
            parts.append(f"`{name}`: {text}.")
        return " ".join(parts)


def _requirement(check: str) -> str | None:
    """The condition that must hold for the statement not to run, as source text."""
    m = _CHECK_RE.match(check.strip())
    if m is None:
        return None
    kind, expr = m.group(1), m.group(2).strip()
    if kind == "assert":
        return expr
    # After "if" stands the whole condition under which the statement runs ("if not (T)" for an else branch): parsed
    # whole and negated.
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    return _negate(node)


def _negate(node: ast.expr) -> str:
    """`not (node)`, written the way a reader states a requirement: a comparison flipped, `x is None` to `x is not None`."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        op = node.ops[0]
        flipped = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
                   ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}.get(type(op))
        if flipped is not None:
            return ast.unparse(ast.Compare(node.left, [flipped()], node.comparators))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ast.unparse(node.operand)
    return f"not ({ast.unparse(node)})"


def _key(node: ast.AST) -> str | None:
    """The name a value goes by: a variable, or the last attribute (`self.parallel_config.tensor_parallel_size` ->
    `tensor_parallel_size`); None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def placeholder_values(template: str, message: str) -> dict[str, str]:
    """The values the message holds for its template's placeholders, by each placeholder's source text and by its last
    name: 'data_parallel_size_local ({self.data_parallel_size_local}) must be <= …' against '… (4) must be <= …' gives
    {'self.data_parallel_size_local': '4', 'data_parallel_size_local': '4', …}."""
    pieces = re.split(r"(\{\{|\}\}|\{[^{}]*\})", template)
    regex, names = [], []
    for p in pieces:
        if not p:
            continue
        if p in ("{{", "}}"):
            regex.append(re.escape(p[0]))
        elif p.startswith("{") and p.endswith("}"):
            names.append(p[1:-1])
            regex.append(f"(?P<g{len(names) - 1}>.+?)")
        else:
            regex.append(re.escape(p))
    if not names:
        return {}
    # A trailing placeholder takes the rest of the message's word; a middle one stops at the next literal text.
    pattern = "".join(regex)
    pattern = re.sub(r"\.\+\?\)$", r"[^\\s,;:)\\]]+)", pattern)
    try:
        m = re.search(pattern, message, re.DOTALL)
    except re.error:
        return {}
    if m is None:
        return {}
    out: dict[str, str] = {}
    for i, name in enumerate(names):
        value = m.group(f"g{i}").strip().strip("'\"")
        if len(value) > 80:
            continue
        out[name] = value
        try:
            key = _key(ast.parse(name, mode="eval").body)
        except SyntaxError:
            key = None
        if key:
            out.setdefault(key, value)
    return out


def explain(check: str, template: str, message: str, tl: StartupTimeline, helper: Any = None) -> Explanation | None:
    """What the check says of this error (see the module docstring), or None when it has no check to read."""
    if not check:
        return None
    requires = _requirement(check)
    if requires is None:
        return None
    try:
        tree = ast.parse(requires, mode="eval").body
    except SyntaxError:
        return None
    ex = Explanation(requires=requires)
    known = placeholder_values(template, message)
    for node in ast.walk(tree):
        name = _key(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if not name or name in ex.values or name in ("self", "cls", "None", "True", "False") or name.startswith("_"):
            continue
        source = ast.unparse(node)
        value, basis = known.get(source) or known.get(name), "the message"
        launch = arg(tl, name)
        if value is None and launch is not None:
            value, basis = str(launch), "this launch's flags"
        flag = flag_for(name, tl.vllm_version)
        if flag:
            ex.flags[name] = flag
        if value is not None:
            ex.values[name] = value
            ex.value_basis[name] = basis
    ex.passes = _passes(tree, ex, tl)
    if helper is not None:
        for node in ast.walk(tree):
            name = _key(node.func) if isinstance(node, ast.Call) else _key(node) if isinstance(node, ast.Attribute) else None
            if name and name not in ex.flags and len(ex.helpers) < 2 and all(n != name for n, _ in ex.helpers):
                text = _helper_text(name, helper)
                if text:
                    ex.helpers.append((name, text))
    return ex


_CONFIG_KEY_RE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")  # a config.json key: snake_case with an underscore


def _definitions(defs: Any) -> list[tuple[str, ast.AST]]:
    """(citation, parsed definition) of each (citation, source) `message_index.helper` returned."""
    import textwrap

    out: list[tuple[str, ast.AST]] = []
    for cite, code in defs:
        try:
            out.append((cite, ast.parse(textwrap.dedent(code))))
        except SyntaxError:
            continue
    return out


def _reads(name: str, helper: Any, depth: int = 0, seen: set[str] | None = None) -> tuple[list[str], list[str], str]:
    """What a helper reads, following the helpers it calls (depth 3): the config keys named as strings in them, the
    chain of names, and the first definition's citation."""
    seen = seen if seen is not None else set()
    if depth > 3 or name in seen:
        return [], [], ""
    seen.add(name)
    defs = helper(name)
    if not defs:
        return [], [], ""
    keys: list[str] = []
    chain = [name]
    cite = ""
    for c, tree in _definitions(defs):
        cite = cite or c
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _CONFIG_KEY_RE.fullmatch(node.value):
                keys.append(node.value)
            elif isinstance(node, ast.Call):
                callee = _key(node.func)
                if callee and callee != name:
                    k, ch, _ = _reads(callee, helper, depth + 1, seen)
                    if k or len(ch) > 0:
                        keys += k
                        if ch and ch[0] not in chain:
                            chain += ch
    return list(dict.fromkeys(keys)), chain, cite


def _helper_text(name: str, helper: Any) -> str | None:
    """A helper in one line: the config keys it reads (through the helpers it calls) and its citation."""
    keys, chain, cite = _reads(name, helper)
    if not chain or not cite:
        return None
    path = " → ".join(chain[:5])
    read = f"it reads the model config's {', '.join(keys[:4])}" if keys else "its definition"
    return f"{read} ({path}; {cite})"


def _passes(tree: ast.expr, ex: Explanation, tl: StartupTimeline) -> list[str]:
    """Instructions that make a simple requirement hold, each with the flag that sets the value it changes."""
    out: list[str] = []
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and type(tree.ops[0]) in _OPS:
        op = _OPS[type(tree.ops[0])]
        left, right = tree.left, tree.comparators[0]
        divisible = _divisibility(left, op, right)
        if divisible is not None:
            return _divides(divisible, ex, tl)
        lk, rk = _key(left), _key(right)
        lv = ex.values.get(lk) if lk else _literal(left)
        rv = ex.values.get(rk) if rk else _literal(right)
        side = {"<": "below", "<=": "at most", ">": "above", ">=": "at least", "==": "equal to", "!=": "other than"}
        if lk and lk in ex.flags and rv is not None:
            out.append(_instruction(ex.flags[lk], lk, f"{side[op]} {rv}", _target(op, rv), tl))
        if rk and rk in ex.flags and lv is not None:
            mirrored = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}[op]
            out.append(_instruction(ex.flags[rk], rk, f"{side[mirrored]} {lv}", _target(mirrored, lv), tl))
    elif isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], (ast.Is, ast.IsNot)):
        k = _key(tree.left)
        if k and k in ex.flags and isinstance(tree.comparators[0], ast.Constant) and tree.comparators[0].value is None:
            verb = "unset" if isinstance(tree.ops[0], ast.Is) else "set"
            out.append(f"{'Leave' if verb == 'unset' else 'Set'} {ex.flags[k]} {'unset' if verb == 'unset' else ''}".rstrip())
    return out


def _literal(node: ast.expr) -> str | None:
    return str(node.value) if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) else None


def _target(op: str, value: str) -> int | None:
    """The value to set for `op value` to hold, for whole numbers: at most 4 -> 4, below 4 -> 3, above 4 -> 5."""
    v = read_number(value)
    if v is None or v != int(v):
        return None
    v = int(v)
    return {"<": v - 1, "<=": v, ">": v + 1, ">=": v, "==": v}.get(op)


def _instruction(flag: str, name: str, condition: str, target: int | None, tl: StartupTimeline) -> str:
    text = f"Set {flag} {condition}"
    if target is not None and target > 0:
        cmd = serve_with(tl, {name: target})
        if cmd:
            text += f": {cmd}"
    return text


def _divisibility(left: ast.expr, op: str, right: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """(a, b) of `a % b == 0` (or `0 == a % b`), else None."""
    for mod, zero in ((left, right), (right, left)):
        if op == "==" and isinstance(mod, ast.BinOp) and isinstance(mod.op, ast.Mod) and isinstance(zero, ast.Constant) \
                and zero.value == 0:
            return mod.left, mod.right
    return None


def _divides(pair: tuple[ast.expr, ast.expr], ex: Explanation, tl: StartupTimeline) -> list[str]:
    a, b = pair
    ak, bk = _key(a), _key(b)
    av = read_number(ex.values.get(ak)) if ak else None
    if av is None or av != int(av) or av <= 0 or not bk or bk not in ex.flags:
        return []
    n = int(av)
    ok = [k for k in range(1, min(n, 64) + 1) if n % k == 0]
    shown = ", ".join(str(k) for k in ok[:12]) + (" …" if len(ok) > 12 else "")
    return [f"Set {ex.flags[bk]} to a divisor of {ak} = {n}: {shown}"]
