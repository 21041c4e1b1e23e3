"""Reliability fixtures: the e2e lab factory, reused for fault-injection runs."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import lab_factory  # noqa: F401 - a fixture, used by name
from tests.helpers import Redfish


@pytest.fixture
def rf(stack):
    return Redfish(stack)
