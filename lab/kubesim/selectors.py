"""Label and field selectors of list and watch requests.

Label selectors are parsed by the same code as the API's user scope (``fleetfish.selectors``,
Kubernetes semantics); field selectors know ``metadata.name`` and ``metadata.namespace`` only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from fleetfish.selectors import matches, parse_selector, split_requirements
from lab.kubesim import errors

Matcher = Callable[[dict], bool]

_FIELD = re.compile(r"^\s*(metadata\.name|metadata\.namespace)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")


def label_matcher(selector: str | None) -> Matcher:
    try:
        requirements = parse_selector(selector)
    except ValueError as exc:
        raise errors.bad_request(f"unable to parse requirement: {exc}") from None
    return lambda labels: matches(requirements, labels)


def field_matcher(selector: str | None) -> Matcher:
    """Only ``metadata.name`` and ``metadata.namespace`` (what clients use to watch one object)."""
    if not selector or not selector.strip():
        return lambda obj: True
    tests: list[Matcher] = []
    for term in split_requirements(selector):
        m = _FIELD.match(term)
        if not m:
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
