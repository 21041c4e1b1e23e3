"""Kubernetes label selectors, parsed and matched as the API server does: ``a=b``, ``a==b``,
``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, comma-separated (all must hold).

Keys and values are checked like Kubernetes label keys and values (a key ``prefix/name``, a
value without ``/``, each at most 63 characters); an empty requirement, an empty set and an
unknown operator are errors. ``!=`` and ``notin`` match an object without the label.
"""

from __future__ import annotations

import re

Requirement = tuple[str, str, tuple[str, ...]]

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"^(?:{_PREFIX}/)?{_NAME}$")
_VALUE = re.compile(rf"^(?:{_NAME})?$")
_SET_EXPR = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQ_EXPR = re.compile(r"^\s*([^\s=!]+)\s*(==|=|!=)\s*(\S*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*(\S+)\s*$")
MAX_PREFIX = 253


def split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside a set ``( ... )``; empty parts are kept."""
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _key(key: str) -> str:
    prefix = key.rpartition("/")[0]
    if not _KEY.match(key) or len(prefix) > MAX_PREFIX:
        raise ValueError(f"invalid label key {key!r}")
    return key


def _value(value: str) -> str:
    if not _VALUE.match(value):
        raise ValueError(f"invalid label value {value!r}")
    return value


def _requirement(part: str) -> Requirement:
    if m := _SET_EXPR.match(part):
        values = tuple(_value(v.strip()) for v in m.group(3).split(","))
        if values == ("",):
            raise ValueError(f"empty set in label selector part {part.strip()!r}")
        return _key(m.group(1)), m.group(2), values
    if m := _EQ_EXPR.match(part):
        op = "!=" if m.group(2) == "!=" else "="
        return _key(m.group(1)), op, (_value(m.group(3)),)
    if m := _EXISTS.match(part):
        return _key(m.group(2)), "!exists" if m.group(1) else "exists", ()
    raise ValueError(f"invalid label selector part {part.strip()!r}")


def parse_selector(selector: str | None) -> list[Requirement]:
    """Label selector text -> [(key, op, values)]; ``""`` selects everything.

    Raises ValueError naming the part at fault.
    """
    if not selector or not selector.strip():
        return []
    requirements = []
    for part in split_requirements(selector):
        try:
            requirements.append(_requirement(part))
        except ValueError as exc:
            raise ValueError(f"invalid label selector {selector!r}: {exc}") from None
    return requirements


def matches(requirements: list[Requirement], labels: dict[str, str]) -> bool:
    """True when ``labels`` satisfy every requirement."""
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        if op in ("=", "in") and (not present or value not in values):
            return False
        if op in ("!=", "notin") and present and value in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
    return True
