"""Which systems a user may see: namespaces plus a Kubernetes label selector, matched on mirror docs."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetfish.mirror import split_system_id
from fleetfish.selectors import matches, parse_selector


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
