"""Redfish PowerState from the mirror: a start or stop the cluster has not finished yet shows
as the transition, never as the state the VM is leaving."""

from __future__ import annotations

import pytest

from fleetfish.mirror import power_state


@pytest.mark.parametrize(
    ("strategy", "status", "expected"),
    [
        ("Halted", "Stopped", "Off"),
        ("Always", "Running", "On"),
        # start has set Always; KubeVirt has not created the VMI yet.
        ("Always", "Stopped", "PoweringOn"),
        ("Always", "Starting", "PoweringOn"),
        # stop has set Halted; the VMI is still there.
        ("Halted", "Running", "PoweringOff"),
        ("Halted", "Stopping", "PoweringOff"),
        # Manual VMs change state through requests, not the strategy.
        ("Manual", "Stopped", "Off"),
        ("Manual", "Running", "On"),
        # A guest that shut itself down stays off under RerunOnFailure.
        ("RerunOnFailure", "Stopped", "Off"),
    ],
)
def test_power_state_follows_the_requested_run_strategy(strategy, status, expected):
    doc = {"runStrategy": strategy, "printableStatus": status}
    assert power_state(doc, {}) == expected


def test_a_deferred_or_running_power_on_shows_powering_on():
    doc = {"runStrategy": "Halted", "printableStatus": "Stopped"}
    assert power_state(doc, {"deferred": "On"}) == "PoweringOn"
    assert power_state(doc, {"inflight": "On"}) == "PoweringOn"
