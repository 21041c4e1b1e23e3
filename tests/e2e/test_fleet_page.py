"""The /fleet page in a real headless Chromium while 20 nodes are provisioned with sushy: it
loads behind the browser's Basic prompt, lists every node, and its own polling (no reload) follows
them until each one booted its CD."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.browser import Browser, find_chromium
from tests.e2e.conftest import boots, ironic, lab_vm_names, system_id, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NODES = 20
IMPORT_SECONDS = 8
CHROMIUM = find_chromium()
# The rows as the page shows them, read from the live DOM.
ROWS_JS = """
Array.from(document.querySelectorAll('#nodes tr')).map(function (row) {
  var cell = function (name) { return row.querySelector('td.' + name).textContent; };
  return {system: row.dataset.system, power: cell('power'), media: cell('media'),
          deferred: cell('deferred'), boot: cell('boot')};
})
"""


@pytest.fixture
def browser(tmp_path, lab):
    profile = tmp_path / "profile"
    profile.mkdir()
    chromium = Browser(CHROMIUM, profile, lab.credentials)
    yield chromium
    chromium.close()


@pytest.fixture
def lab(lab_factory):
    return lab_factory(vms=NODES, import_seconds=IMPORT_SECONDS, workers=2)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
def test_the_fleet_page_follows_twenty_nodes_to_their_cd_boot(lab, browser, tmp_path):
    names = lab_vm_names(NODES)
    browser.navigate(f"{lab.redfish_url}/fleet")
    rows = wait_for(
        lambda: (r := browser.evaluate(ROWS_JS)) and len(r) == NODES and r,
        30,
        what="the page listing every node",
    )
    assert sorted(r["system"] for r in rows) == sorted(system_id(n) for n in names)
    assert browser.auth_challenges >= 1  # the browser was asked, and answered like a user
    browser.evaluate("window.loadedOnce = true")

    images = {system_id(n): f"{lab.iso_url}/images/page-{n}.iso" for n in names}
    started = time.time()
    runs: list = []
    provisioning = threading.Thread(
        target=lambda: runs.extend(ironic(lab).provision_all(images, power_timeout=120))
    )
    provisioning.start()
    seen: dict[str, set[str]] = {"media": set(), "deferred": set()}

    def every_node_booted_cd():
        current = browser.evaluate(ROWS_JS) or []
        for row in current:
            seen["media"].add(row["media"].split(" ")[0])
            seen["deferred"].add(row["deferred"])
        booted = [r for r in current if r["boot"].startswith("Cd ")]
        return len(booted) == NODES and current

    final = wait_for(every_node_booted_cd, IMPORT_SECONDS * 3 + 90, "every node booted Cd", 0.5)
    provisioning.join(timeout=150)
    assert [r.error for r in runs] == [""] * NODES
    # The same page all along: its own polls brought each change, no reload.
    assert browser.evaluate("window.loadedOnce") is True
    # Seen on the way: imports in progress and power-ons waiting for them.
    assert "importing" in seen["media"], seen
    assert "On" in seen["deferred"], seen
    assert {r["power"] for r in final} <= {"On", "PoweringOn"}
    assert all(r["media"] == f"inserted page-{r['system'].split('.', 1)[1]}.iso" for r in final)
    # What the page says each node booted is what the simulated firmware booted.
    by_vm = {b["vm"]: b for b in boots(lab, since=started)}
    assert all(by_vm[n]["kind"] == "cdrom" for n in names), by_vm

    shot = Path(os.environ.get("FLEETFISH_FLEET_SCREENSHOT") or tmp_path / "fleet-page.png")
    browser.evaluate("document.querySelector('#nodes details').open = true")
    browser.screenshot(shot)
    assert shot.stat().st_size > 10_000
    if shutil.which("file"):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
