"""Follow-up tasks a power-on sends by name: end a Once boot override, watch the start."""

from __future__ import annotations

from celery import current_app

# The first look at a start: the simulator and a warm cluster start a VMI in about a second.
START_CHECK_FIRST = 1.0


def schedule_revert(system_id: str, vmi_uid_before: str, boot_gen: str) -> None:
    # boot_gen travels in args: a retry replaces the kwargs, never the args.
    current_app.send_task(
        "boot.revert_once", args=(system_id, vmi_uid_before, boot_gen or None), countdown=1
    )


def schedule_start_check(system_id: str, task_id: str, vmi_uid_before: str) -> None:
    """Sent before the start itself: a worker dying right after the start still has it done."""
    current_app.send_task(
        "power.verify", args=(system_id, task_id, vmi_uid_before), countdown=START_CHECK_FIRST
    )
