"""Account management through the AccountService, driven with DMTF's clients against gunicorn.

The `redfish` library logs in (Basic or session) and DMTF's Redfish-Tacklebox
(`redfish_utilities.accounts`) adds, changes and deletes accounts the way operators' scripts do
(GET for the ETag, then PATCH with If-Match).
"""

from __future__ import annotations

import base64
import time

import pytest
import redfish
import redfish_utilities
import requests
from redfish.rest.v1 import InvalidCredentialsError
from redfish_utilities.messages import (
    RedfishOperationFailedError,
    RedfishPasswordChangeRequiredError,
)

from tests.api.api_gunicorn import running_gunicorn
from tests.api.api_helpers import PASSWORDS, SYS_URI
from tests.polling import wait_for

ACCOUNTS = "/redfish/v1/AccountService/Accounts"
SERVICE = "/redfish/v1/AccountService"
SYSTEMS = "/redfish/v1/Systems"
NEW_PW = "new-account-pw-1"


class Service:
    """A running API and ways in: DMTF clients, or plain requests for exact headers."""

    def __init__(self, url: str, log_path):
        self.url = url
        self.log_path = log_path
        self.admin = self.client("admin", PASSWORDS["admin"])

    def client(self, user: str, password: str, auth: str = "session"):
        conn = redfish.redfish_client(
            base_url=self.url, username=user, password=password, default_prefix="/redfish/v1/"
        )
        conn.login(auth=auth)
        return conn

    def basic(self, method: str, path: str, user: str, password: str, **kwargs):
        return requests.request(
            method, self.url + path, auth=(user, password), timeout=15, **kwargs
        )

    def log(self) -> str:
        return self.log_path.read_text()


@pytest.fixture
def service(redis_url, users_file, systems, tmp_path):
    # The bcrypt budget is off: these tests log in with many fresh credentials in a row, which
    # is what the budget defers (tests/security/test_bruteforce.py covers that).
    with running_gunicorn(redis_url, users_file, tmp_path, FLEETFISH_BCRYPT_SHARE="0") as (
        port,
        log_path,
    ):
        yield Service(f"http://127.0.0.1:{port}", log_path)


def ids(resp) -> list[str]:
    body = resp.dict if hasattr(resp, "dict") else resp.json()
    return [m["MessageId"].rsplit(".", 1)[-1] for m in body["error"]["@Message.ExtendedInfo"]]


def related(resp) -> list[str]:
    body = resp.dict if hasattr(resp, "dict") else resp.json()
    return [p for m in body["error"]["@Message.ExtendedInfo"] for p in m["RelatedProperties"]]


def test_created_account_logs_in_with_basic_and_session_and_is_audited(service):
    redfish_utilities.add_user(service.admin, "alice", NEW_PW, "Operator")
    account = service.admin.get(f"{ACCOUNTS}/alice")
    assert account.status == 200
    assert account.dict["RoleId"] == "Operator" and account.dict["Enabled"] is True
    assert (
        account.dict["Password"] is None and account.dict["Oem"]["Fleetfish"]["Source"] == "redfish"
    )
    assert account.getheader("ETag") == account.dict["@odata.etag"]
    listed = [m["@odata.id"] for m in service.admin.get(ACCOUNTS).dict["Members"]]
    assert f"{ACCOUNTS}/alice" in listed and f"{ACCOUNTS}/admin" in listed

    session = service.client("alice", NEW_PW)
    assert session.get(SYS_URI).status == 200
    basic = service.client("alice", NEW_PW, auth="basic")
    assert basic.get(SYS_URI).status == 200
    # An Operator may act on systems but not manage accounts.
    assert (
        session.post(
            ACCOUNTS, body={"UserName": "x1", "Password": NEW_PW, "RoleId": "ReadOnly"}
        ).status
        == 403
    )

    log = service.log()
    assert "account 'alice' created by 'admin'" in log and "RoleId=Operator" in log
    assert NEW_PW not in log


def test_scope_of_a_created_account_hides_other_systems(service):
    body = {
        "UserName": "scoped",
        "Password": NEW_PW,
        "RoleId": "ReadOnly",
        "Oem": {"Fleetfish": {"Systems": {"Namespaces": ["lab-b"]}}},
    }
    assert service.admin.post(ACCOUNTS, body=body).status == 201
    scoped = service.client("scoped", NEW_PW)
    members = [m["@odata.id"] for m in scoped.get(SYSTEMS).dict["Members"]]
    assert members == [f"{SYSTEMS}/lab-b.other-0"]
    assert scoped.get(SYS_URI).status == 404
    # ReadOnly: no writes but its own password.
    assert scoped.patch(f"{ACCOUNTS}/scoped", body={"RoleId": "Administrator"}).status == 403
    assert scoped.delete(f"{ACCOUNTS}/scoped").status == 403
    assert scoped.patch(SERVICE, body={"AccountLockoutThreshold": 0}).status == 403
    assert scoped.get(f"{ACCOUNTS}/admin").status == 404


def test_disabling_ends_sessions_at_once_and_refuses_basic(service):
    redfish_utilities.add_user(service.admin, "bob", NEW_PW, "Operator")
    session = service.client("bob", NEW_PW)
    assert session.get(SYS_URI).status == 200
    assert service.basic("GET", SYS_URI, "bob", NEW_PW).status_code == 200

    redfish_utilities.modify_user(service.admin, "bob", new_enabled=False)
    assert session.get(SYS_URI).status == 401
    assert service.basic("GET", SYS_URI, "bob", NEW_PW).status_code == 401
    with pytest.raises(InvalidCredentialsError):
        service.client("bob", NEW_PW)

    redfish_utilities.modify_user(service.admin, "bob", new_enabled=True)
    assert service.basic("GET", SYS_URI, "bob", NEW_PW).status_code == 200
    # The session ended for good: enabling the account again does not bring it back.
    assert session.get(SYS_URI).status == 401


def test_own_password_change_keeps_this_session_and_ends_the_others(service):
    redfish_utilities.add_user(service.admin, "carol", NEW_PW, "ReadOnly")
    here = service.client("carol", NEW_PW)
    there = service.client("carol", NEW_PW)
    assert (
        service.basic("GET", SYS_URI, "carol", NEW_PW).status_code == 200
    )  # cached in the process

    redfish_utilities.modify_user(here, "carol", new_password="carol-second-pw")
    assert here.get(SYS_URI).status == 200
    assert there.get(SYS_URI).status == 401
    assert service.basic("GET", SYS_URI, "carol", NEW_PW).status_code == 401
    assert service.basic("GET", SYS_URI, "carol", "carol-second-pw").status_code == 200

    # An Administrator setting it ends every session of the user, this one too.
    redfish_utilities.modify_user(service.admin, "carol", new_password="carol-third-pw")
    assert here.get(SYS_URI).status == 401
    assert "Password=(changed)" in service.log() and "carol-third-pw" not in service.log()


def test_delete_ends_sessions_and_a_new_account_of_that_name_does_not_revive_them(service):
    redfish_utilities.add_user(service.admin, "dave", NEW_PW, "Operator")
    session = service.client("dave", NEW_PW)
    assert session.get(SYS_URI).status == 200

    redfish_utilities.delete_user(service.admin, "dave")
    assert session.get(SYS_URI).status == 401
    assert service.admin.get(f"{ACCOUNTS}/dave").status == 404
    assert service.basic("GET", SYS_URI, "dave", NEW_PW).status_code == 401

    redfish_utilities.add_user(service.admin, "dave", NEW_PW, "Operator")
    assert session.get(SYS_URI).status == 401
    assert service.basic("GET", SYS_URI, "dave", NEW_PW).status_code == 200
    assert "account 'dave' deleted by 'admin' (1 session(s) ended)" in service.log()


def test_users_file_accounts_refuse_changes_and_win_on_a_name_clash(service):
    before = service.admin.get(f"{ACCOUNTS}/operator")
    assert before.dict["Oem"]["Fleetfish"]["Source"] == "file"

    patched = service.admin.patch(f"{ACCOUNTS}/operator", body={"RoleId": "ReadOnly"})
    assert patched.status == 400 and ids(patched) == ["PropertyNotWritable"]
    assert "users file" in patched.dict["error"]["@Message.ExtendedInfo"][0]["Resolution"]
    deleted = service.admin.delete(f"{ACCOUNTS}/operator")
    assert deleted.status == 405 and ids(deleted) == ["ResourceCannotBeDeleted"]
    assert "users file" in deleted.dict["error"]["@Message.ExtendedInfo"][0]["Resolution"]
    with pytest.raises(RedfishOperationFailedError, match="ResourceAlreadyExists"):
        redfish_utilities.add_user(service.admin, "operator", NEW_PW, "Administrator")

    after = service.admin.get(f"{ACCOUNTS}/operator")
    assert after.dict == before.dict
    assert service.basic("GET", SYS_URI, "operator", PASSWORDS["operator"]).status_code == 200
    # Nor can a user of the file change its own password here.
    own = service.client("viewer", PASSWORDS["viewer"])
    assert own.patch(f"{ACCOUNTS}/viewer", body={"Password": NEW_PW}).status == 400


def test_account_names_are_unique(service):
    redfish_utilities.add_user(service.admin, "erin", NEW_PW, "Operator")
    again = service.admin.post(
        ACCOUNTS, body={"UserName": "erin", "Password": NEW_PW, "RoleId": "ReadOnly"}
    )
    assert again.status == 409 and ids(again) == ["ResourceAlreadyExists"]
    assert service.admin.get(f"{ACCOUNTS}/erin").dict["RoleId"] == "Operator"


def test_password_change_required_allows_only_the_change(service):
    body = {
        "UserName": "frank",
        "Password": NEW_PW,
        "RoleId": "Operator",
        "PasswordChangeRequired": True,
    }
    assert service.admin.post(ACCOUNTS, body=body).status == 201
    conn = redfish.redfish_client(
        base_url=service.url, username="frank", password=NEW_PW, default_prefix="/redfish/v1/"
    )
    # The session is made; the library reports the message that came with it.
    with pytest.raises(RedfishPasswordChangeRequiredError) as raised:
        conn.login(auth="session")
    assert raised.value.args[1] == f"{ACCOUNTS}/frank"

    refused = conn.get(SYS_URI)
    assert refused.status == 403 and ids(refused) == ["PasswordChangeRequired"]
    basic = service.basic("GET", SYSTEMS, "frank", NEW_PW)
    assert basic.status_code == 403 and ids(basic) == ["PasswordChangeRequired"]
    own = conn.get(f"{ACCOUNTS}/frank")
    assert own.status == 200 and own.dict["PasswordChangeRequired"] is True
    role = conn.patch(f"{ACCOUNTS}/frank", body={"RoleId": "Administrator"})
    assert role.status == 403
    # The way to its account is readable, other accounts are not listed.
    listed = [m["@odata.id"] for m in conn.get(ACCOUNTS).dict["Members"]]
    assert listed == [f"{ACCOUNTS}/frank"]

    redfish_utilities.modify_user(conn, "frank", new_password="frank-own-pw-2")
    assert conn.get(f"{ACCOUNTS}/frank").dict["PasswordChangeRequired"] is False
    assert conn.get(SYS_URI).status == 200
    assert service.basic("GET", SYS_URI, "frank", "frank-own-pw-2").status_code == 200


def test_lockout_settings_are_honoured_and_an_admin_unlocks(service):
    redfish_utilities.add_user(service.admin, "gina", NEW_PW, "Operator")
    changed = service.admin.patch(
        SERVICE,
        body={
            "AccountLockoutThreshold": 2,
            "AccountLockoutDuration": 300,
            "AccountLockoutCounterResetAfter": 300,
        },
    )
    assert changed.status == 200 and changed.dict["AccountLockoutThreshold"] == 2
    for _ in range(2):
        assert service.basic("GET", SYS_URI, "gina", "wrong-password").status_code == 401
    # Locked after two failures: the right password is refused too.
    assert service.basic("GET", SYS_URI, "gina", NEW_PW).status_code == 401
    assert service.admin.get(f"{ACCOUNTS}/gina").dict["Locked"] is True

    redfish_utilities.modify_user(service.admin, "gina", new_locked=False)
    assert service.admin.get(f"{ACCOUNTS}/gina").dict["Locked"] is False
    assert service.basic("GET", SYS_URI, "gina", NEW_PW).status_code == 200

    # A users-file account is unlocked the same way (its only writable property).
    for _ in range(2):
        service.basic("GET", SYS_URI, "operator", "wrong-password")
    assert service.basic("GET", SYS_URI, "operator", PASSWORDS["operator"]).status_code == 401
    unlocked = service.admin.patch(f"{ACCOUNTS}/operator", body={"Locked": False})
    assert unlocked.status == 200 and unlocked.dict["Locked"] is False
    assert service.basic("GET", SYS_URI, "operator", PASSWORDS["operator"]).status_code == 200

    # Threshold 0: never locked.
    assert service.admin.patch(SERVICE, body={"AccountLockoutThreshold": 0}).status == 200
    for _ in range(4):
        service.basic("GET", SYS_URI, "gina", "wrong-password")
    assert service.basic("GET", SYS_URI, "gina", NEW_PW).status_code == 200
    assert "AccountService changed by 'admin': AccountLockoutThreshold=0" in service.log()


def test_a_shorter_lockout_duration_ends_the_lock_sooner(service):
    redfish_utilities.add_user(service.admin, "lena", NEW_PW, "Operator")
    policy = {
        "AccountLockoutThreshold": 3,
        "AccountLockoutDuration": 2,
        "AccountLockoutCounterResetAfter": 2,
    }
    assert service.admin.patch(SERVICE, body=policy).status == 200
    for _ in range(3):
        service.basic("GET", SYS_URI, "lena", "wrong-password")
    locked_at = time.monotonic()
    assert service.basic("GET", SYS_URI, "lena", NEW_PW).status_code == 401
    # Polled with a GET of the account, which does not count as an attempt.
    wait_for(
        lambda: service.admin.get(f"{ACCOUNTS}/lena").dict["Locked"] is False,
        timeout=10,
        what="the lock to end",
    )
    assert time.monotonic() - locked_at < 5  # the default duration is 60 s
    assert service.basic("GET", SYS_URI, "lena", NEW_PW).status_code == 200


def test_password_length_policy_applies_to_new_passwords(service):
    assert service.admin.patch(SERVICE, body={"MinPasswordLength": 12}).status == 200
    short = service.admin.post(
        ACCOUNTS, body={"UserName": "hank", "Password": "elevenchars", "RoleId": "Operator"}
    )
    assert short.status == 400 and ids(short) == ["PropertyValueIncorrect"]
    assert related(short) == ["#/Password"]
    assert "elevenchars" not in short.text and "12 to 72" in short.text
    assert service.admin.get(f"{ACCOUNTS}/hank").status == 404
    assert (
        service.admin.post(
            ACCOUNTS, body={"UserName": "hank", "Password": "twelve-chars", "RoleId": "Operator"}
        ).status
        == 201
    )


def test_bad_requests_name_the_property_and_change_nothing(service):
    redfish_utilities.add_user(service.admin, "ivan", NEW_PW, "Operator")
    before = service.admin.get(f"{ACCOUNTS}/ivan")
    uri = f"{ACCOUNTS}/ivan"

    bad_role = service.admin.patch(uri, body={"RoleId": "Root", "Enabled": False})
    assert bad_role.status == 400 and ids(bad_role) == ["PropertyValueNotInList"]
    assert related(bad_role) == ["#/RoleId"]
    too_short = service.admin.patch(uri, body={"Password": "short", "Enabled": False})
    assert ids(too_short) == ["PropertyValueIncorrect"] and related(too_short) == ["#/Password"]
    unknown = service.admin.patch(uri, body={"Shoe": 1})
    assert ids(unknown) == ["PropertyUnknown"] and related(unknown) == ["#/Shoe"]
    read_only = service.admin.patch(uri, body={"Id": "other", "Enabled": False})
    assert ids(read_only) == ["PropertyNotWritable"] and related(read_only) == ["#/Id"]
    lock = service.admin.patch(uri, body={"Locked": True})
    assert ids(lock) == ["PropertyValueNotInList"]
    wrong_type = service.admin.patch(uri, body={"Password": 12345678})
    assert ids(wrong_type) == ["PropertyValueTypeError"] and "12345678" not in wrong_type.text
    odata_only = service.admin.patch(uri, body={"@odata.id": uri + "/"})
    assert odata_only.status == 400 and ids(odata_only) == ["NoOperation"]
    stale = service.admin.patch(uri, body={"Enabled": False}, headers={"If-Match": '"stale"'})
    assert stale.status == 412 and ids(stale) == ["PreconditionFailed"]
    missing = service.admin.post(ACCOUNTS, body={"UserName": "jill"})
    assert missing.status == 400 and set(ids(missing)) == {"PropertyMissing"}
    bad_name = service.admin.post(
        ACCOUNTS, body={"UserName": "../x", "Password": NEW_PW, "RoleId": "Operator"}
    )
    assert bad_name.status == 400 and ids(bad_name) == ["PropertyValueFormatError"]
    bad_scope = service.admin.post(
        ACCOUNTS,
        body={
            "UserName": "jill",
            "Password": NEW_PW,
            "RoleId": "Operator",
            "Oem": {"Fleetfish": {"Systems": {"LabelSelector": "a in (b"}}},
        },
    )
    assert ids(bad_scope) == ["PropertyValueFormatError"]
    assert related(bad_scope) == ["#/Oem/Fleetfish/Systems/LabelSelector"]

    after = service.admin.get(uri)
    assert after.dict == before.dict and after.getheader("ETag") == before.getheader("ETag")
    assert service.admin.get(f"{ACCOUNTS}/jill").status == 404
    assert service.basic("GET", SYS_URI, "ivan", NEW_PW).status_code == 200


def test_bad_policy_values_are_refused_whole(service):
    before = service.admin.get(SERVICE).dict
    out_of_range = service.admin.patch(
        SERVICE, body={"MaxPasswordLength": 100, "AccountLockoutThreshold": 3}
    )
    assert out_of_range.status == 400 and ids(out_of_range) == ["PropertyValueOutOfRange"]
    conflict = service.admin.patch(SERVICE, body={"MinPasswordLength": 20, "MaxPasswordLength": 10})
    assert ids(conflict) == ["PropertyValueConflict"]
    window = service.admin.patch(SERVICE, body={"AccountLockoutCounterResetAfter": 120})
    assert ids(window) == ["PropertyValueConflict"] and related(window) == [
        "#/AccountLockoutCounterResetAfter"
    ]
    read_only = service.admin.patch(SERVICE, body={"ServiceEnabled": False})
    assert ids(read_only) == ["PropertyNotWritable"]
    assert service.admin.get(SERVICE).dict == before
    operator = service.client("operator", PASSWORDS["operator"])
    assert operator.patch(SERVICE, body={"AccountLockoutThreshold": 1}).status == 403


def test_stale_if_match_on_delete_keeps_the_account(service):
    redfish_utilities.add_user(service.admin, "kate", NEW_PW, "Operator")
    stale = service.admin.delete(f"{ACCOUNTS}/kate", headers={"If-Match": '"stale"'})
    assert stale.status == 412
    etag = service.admin.get(f"{ACCOUNTS}/kate").getheader("ETag")
    assert service.admin.delete(f"{ACCOUNTS}/kate", headers={"If-Match": etag}).status == 204
    assert service.admin.get(f"{ACCOUNTS}/kate").status == 404


def _basic_header(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_an_overlong_basic_password_is_a_plain_401(service):
    # bcrypt reads 72 bytes at most; a longer guess is refused like any wrong one, never a 500.
    resp = requests.get(
        service.url + SYS_URI, headers=_basic_header("nobody", "x" * 100), timeout=15
    )
    assert resp.status_code == 401
