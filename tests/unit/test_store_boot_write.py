"""A checked boot write (the If-Match of a PATCH) against a real Redis: it lands only on the
state that was checked, whether the caller hands in what it read or the Store reads it."""

from __future__ import annotations

from fleetfish.store import key_power, key_system

SYSTEM = "ns.vm"
DOC = {"id": SYSTEM, "name": "vm", "namespace": "ns", "firmware": "efi"}


def read(store):
    [(doc, power, boot)] = store.systems_with([SYSTEM], "power", "boot")
    return doc, power, boot


def counting(calls: list, verdict: bool = True):
    def unchanged(doc, power, boot):
        calls.append((doc, power, boot))
        return verdict

    return unchanged


def test_a_write_on_the_state_just_read_lands_at_once_and_returns_what_it_wrote(store):
    store.put_system(DOC)
    # Values Lua and Python could digest differently: non-ASCII, separators, empty.
    store.r.hset(key_power(SYSTEM), mapping={"state": "Off", "note": "é:1:", "empty": ""})
    store.set_boot(SYSTEM, enabled="Disabled", target="None")
    checks: list = []
    written = store.write_boot_if(
        SYSTEM, counting(checks), seen=read(store), enabled="Once", target="Cd"
    )
    assert len(checks) == 1  # the digests matched: no second read
    assert written == store.get_boot(SYSTEM)
    assert (written["enabled"], written["target"], written["gen"]) == ("Once", "Cd", "2")


def test_a_write_whose_state_changed_after_it_was_read_is_checked_again_on_the_new_state(store):
    store.put_system(DOC)
    store.set_boot(SYSTEM, enabled="Disabled", target="None")
    seen = read(store)
    store.r.hset(key_power(SYSTEM), "state", "On")  # a worker's write after the read
    checks: list = []
    written = store.write_boot_if(SYSTEM, counting(checks), seen=seen, target="Cd")
    assert [power.get("state") for _, power, _ in checks] == [None, "On"]
    assert written["target"] == "Cd"


def test_a_write_refused_by_its_check_changes_nothing(store):
    store.put_system(DOC)
    store.set_boot(SYSTEM, enabled="Disabled", target="None")
    before = store.get_boot(SYSTEM)
    assert store.write_boot_if(SYSTEM, counting([], False), seen=read(store), target="Cd") is None
    assert store.get_boot(SYSTEM) == before


def test_a_document_stored_in_another_spelling_still_gets_its_write(store):
    # Written by something other than encode_doc (key order, spaces): the digest of what the
    # caller read cannot match, so the Store reads the stored text itself.
    store.r.set(key_system(SYSTEM), '{"namespace": "ns", "id": "ns.vm", "name": "vm"}')
    checks: list = []
    written = store.write_boot_if(SYSTEM, counting(checks), seen=read(store), target="Cd")
    assert len(checks) == 2
    assert written["target"] == "Cd"
