"""Label and field selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``."""

from __future__ import annotations

import re
from collections.abc import Callable

from lab.kubesim import errors

Matcher = Callable[[dict], bool]

_SET = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def label_matcher(selector: str | None) -> Matcher:
    if not selector or not selector.strip():
        return lambda labels: True
    tests: list[Matcher] = []
    for term in _split(selector):
        if m := _SET.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                tests.append(lambda lb, k=key, vs=values: lb.get(k) in vs)
            else:
                tests.append(lambda lb, k=key, vs=values: lb.get(k) not in vs)
        elif m := _EQ.match(term):
            key, op, value = m.groups()
            if op == "!=":
                tests.append(lambda lb, k=key, v=value: lb.get(k) != v)
            else:
                tests.append(lambda lb, k=key, v=value: lb.get(k) == v)
        elif m := _EXISTS.match(term):
            neg, key = m.groups()
            if neg:
                tests.append(lambda lb, k=key: k not in lb)
            else:
                tests.append(lambda lb, k=key: k in lb)
        else:
            raise errors.bad_request(f"unable to parse requirement: {term.strip()!r}")
    return lambda labels: all(t(labels) for t in tests)


def field_matcher(selector: str | None) -> Matcher:
    """Only ``metadata.name`` and ``metadata.namespace`` (what clients use to watch one object)."""
    if not selector or not selector.strip():
        return lambda obj: True
    tests: list[Matcher] = []
    for term in _split(selector):
        m = _EQ.match(term)
        if not m or m.group(1) not in ("metadata.name", "metadata.namespace"):
            raise errors.bad_request(
                f'"{term.strip()}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            )
        field, op, value = m.groups()
        attr = field.split(".", 1)[1]
        if op == "!=":
            tests.append(lambda o, a=attr, v=value: o["metadata"].get(a, "") != v)
        else:
            tests.append(lambda o, a=attr, v=value: o["metadata"].get(a, "") == v)
    return lambda obj: all(t(obj) for t in tests)
