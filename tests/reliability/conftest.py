"""Reliability fixtures: a lab factory (as in tests/e2e) that survives a port taken meanwhile."""

from __future__ import annotations

import pytest

from lab.stack import LabConfig, LabStack
from tests.helpers import Redfish

START_ATTEMPTS = 3


@pytest.fixture(scope="module")
def lab_factory(tmp_path_factory):
    """Start a lab with LabConfig overrides; stopped at the end of the module.

    free_port() picks ports that are free now; another engineer's parallel run can take one
    before our process binds it, so a start that failed on a taken port is tried again with
    new ports.
    """
    stacks: list[LabStack] = []

    def start(**overrides) -> LabStack:
        overrides.setdefault("flower", False)
        for attempt in range(START_ATTEMPTS):
            config = LabConfig.for_tests(tmp_path_factory.mktemp("lab"), **overrides)
            try:
                stack = LabStack(config).start(timeout=90)
            except (RuntimeError, TimeoutError) as exc:
                if "already in use" not in str(exc) or attempt == START_ATTEMPTS - 1:
                    raise
                continue
            stacks.append(stack)
            return stack
        raise AssertionError("unreachable")

    yield start
    for stack in stacks:
        stack.stop()


@pytest.fixture
def rf(stack):
    return Redfish(stack)
