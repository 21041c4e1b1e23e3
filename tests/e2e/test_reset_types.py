"""ForceOn, PowerCycle and PushPowerButton through sushy, end to end: the VM's power in the
simulator follows each one, and a power-on sent while media is pending waits for the ISO."""

from __future__ import annotations

import time

import pytest
import sushy

from tests.e2e.conftest import VMTimeline, ironic, system_id
from tests.helpers import Redfish, boots, wait_boot, wait_for

pytestmark = pytest.mark.e2e

IMPORT_SECONDS = 4
POWER_WAIT = 60
# sushy has no system-level alias for it; the enum is what reset_system takes.
POWER_CYCLE = sushy.ResetType.POWER_CYCLE


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=4, import_seconds=IMPORT_SECONDS, workers=1, visibility_timeout=8)


@pytest.fixture
def rf(stack):
    return Redfish(stack)


def power_state(rf: Redfish, vm: str, wanted: str) -> None:
    wait_for(lambda: rf.system(vm)["PowerState"] == wanted, POWER_WAIT, what=f"{vm} {wanted}")


def press(stack, vm: str, reset_type) -> None:
    """One Reset as Ironic sends it: sushy checks the type against the advertised values."""
    system = ironic(stack).system(system_id(vm))
    assert reset_type in system.get_allowed_reset_system_values()
    system.reset_system(reset_type)


def test_each_reset_type_moves_the_vm_as_its_name_says(stack, rf):
    vm = "ostest-master-0"
    rf.power_off_and_eject(vm)

    since = time.time()
    press(stack, vm, sushy.RESET_FORCE_ON)
    first = wait_boot(stack, vm, since, POWER_WAIT)
    power_state(rf, vm, "On")

    # PowerCycle of a running VM: a new VMI boots, the VM ends up on.
    since = time.time()
    press(stack, vm, POWER_CYCLE)
    cycled = wait_boot(stack, vm, since, POWER_WAIT)
    assert cycled["vmi_uid"] != first["vmi_uid"]
    power_state(rf, vm, "On")

    # The power button toggles: on -> off, off -> on.
    press(stack, vm, sushy.RESET_PUSH_POWER_BUTTON)
    power_state(rf, vm, "Off")
    since = time.time()
    press(stack, vm, sushy.RESET_PUSH_POWER_BUTTON)
    wait_boot(stack, vm, since, POWER_WAIT)
    power_state(rf, vm, "On")

    # PowerCycle of a VM that is off starts it.
    rf.power_off_and_eject(vm)
    since = time.time()
    press(stack, vm, POWER_CYCLE)
    wait_boot(stack, vm, since, POWER_WAIT)
    power_state(rf, vm, "On")
    assert (
        sushy.RESET_NMI not in ironic(stack).system(system_id(vm)).get_allowed_reset_system_values()
    )


@pytest.mark.parametrize(
    ("vm", "reset_type"),
    [
        ("ostest-master-1", sushy.RESET_FORCE_ON),
        ("ostest-master-2", POWER_CYCLE),
        ("ostest-worker-0", sushy.RESET_PUSH_POWER_BUTTON),
    ],
)
def test_a_power_on_sent_while_media_is_pending_waits_for_the_iso(stack, rf, vm, reset_type):
    rf.power_off_and_eject(vm)
    timeline = VMTimeline(stack)
    try:
        timeline.watching(vm)
        image = f"{stack.iso_url}/images/{reset_type.value}-{vm}.iso"
        since = time.time()
        assert rf.insert(vm, image).status_code == 202
        rf.boot_cd_once(vm)
        press(stack, vm, reset_type)
        assert rf.system(vm)["PowerState"] == "PoweringOn"
        record = wait_boot(stack, vm, since, IMPORT_SECONDS + POWER_WAIT)
        assert (record["kind"], record["image_url"]) == ("cdrom", image), record
        power_state(rf, vm, "On")
        assert [b["vm"] for b in boots(stack, since)].count(vm) == 1
        timeline.recorded(vm)
        assert timeline.attached[vm] <= timeline.started[vm], "powered on before the ISO"
    finally:
        timeline.stop()
