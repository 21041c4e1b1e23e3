"""Which systems a user may see: namespaces plus a Kubernetes label selector, matched on mirror docs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleetfish.mirror import split_system_id

_SET_EXPR = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_EXPR = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*$")


def _split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside a set ``( ... )``."""
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
    if current.strip():
        parts.append(current)
    return [p for p in parts if p.strip()]


def parse_selector(selector: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """Kubernetes label selector syntax -> [(key, op, values)]; raises ValueError when invalid."""
    requirements = []
    for part in _split_requirements(selector or ""):
        if m := _SET_EXPR.match(part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            requirements.append((m.group(1), m.group(2), values))
        elif m := _EQ_EXPR.match(part):
            op = "!=" if m.group(2) == "!=" else "="
            requirements.append((m.group(1), op, (m.group(3),)))
        elif m := _EXISTS.match(part):
            requirements.append((m.group(2), "!exists" if m.group(1) else "exists", ()))
        else:
            raise ValueError(f"invalid label selector part {part!r}")
    return requirements


def matches(requirements: list[tuple[str, str, tuple[str, ...]]], labels: dict[str, str]) -> bool:
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        if op == "=" and value != values[0]:
            return False
        if op == "!=" and value == values[0]:
            return False
        if op == "in" and value not in values:
            return False
        if op == "notin" and present and value in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
    return True


@dataclass(frozen=True)
class Scope:
    """Systems a user may see; an empty scope (no namespaces, no selector) means all systems."""

    namespaces: tuple[str, ...] = ()
    requirements: list = field(default_factory=list)

    @property
    def unrestricted(self) -> bool:
        return not self.namespaces and not self.requirements

    def allows_id(self, system_id: str) -> bool:
        """Cheap pre-check from the id alone (namespace part); labels need the document."""
        return not self.namespaces or split_system_id(system_id)[0] in self.namespaces

    def allows(self, doc: dict | None) -> bool:
        if doc is None:
            return self.unrestricted
        if self.namespaces and doc.get("namespace") not in self.namespaces:
            return False
        return matches(self.requirements, doc.get("labels") or {})

    @classmethod
    def from_config(cls, systems: dict | None) -> Scope:
        systems = systems or {}
        namespaces = systems.get("namespaces") or ()
        if isinstance(namespaces, str):
            namespaces = (namespaces,)
        return cls(tuple(namespaces), parse_selector(systems.get("labelSelector") or ""))
