"""Bad input in-process (Flask test client, real Redis): always a clear 4xx Redfish error, never a
500, and the stored media/boot/power state and the queues are exactly as before."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.image_url import parse
from tests.api.api_helpers import (
    ADMIN,
    CD_URI,
    EJECT_URI,
    INSERT_URI,
    ISO,
    RESET_URI,
    SYS,
    SYS_URI,
    basic,
)

BASE_ID = re.compile(r"^Base\.1\.22\.[A-Za-z]+$")
LOGIN = "/redfish/v1/SessionService/Sessions"
STATE_PATTERNS = ("ff:media:*", "ff:mediacred:*", "ff:boot:*", "ff:power:*")
QUEUES = ("fleetfish.media", "fleetfish.power")
FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# Every endpoint that takes a body, with its body wrapped the way each test needs.
WRITES = {
    "patch": ("PATCH", SYS_URI),
    "insert": ("POST", INSERT_URI),
    "eject": ("POST", EJECT_URI),
    "reset": ("POST", RESET_URI),
    "login": ("POST", LOGIN),
}

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def snapshot(store) -> dict:
    state = {}
    for pattern in STATE_PATTERNS:
        for key in store.r.scan_iter(pattern):
            state[key] = store.r.hgetall(key)
    state["queues"] = {q: store.r.llen(q) for q in QUEUES}
    return state


@pytest.fixture
def seeded(client, store, systems):
    """A system with media being inserted and a Once boot override: state worth protecting."""
    assert client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN).status_code == 202
    body = {"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}}
    assert client.patch(SYS_URI, json=body, headers=ADMIN).status_code == 200
    assert client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN).status_code == 202
    return snapshot(store)


def send(client, method: str, path: str, *, body=None, raw: bytes | None = None, headers=None):
    headers = {**ADMIN, **(headers or {})}
    if raw is not None:
        headers.setdefault("Content-Type", "application/json")
        return client.open(path, method=method, data=raw, headers=headers)
    return client.open(path, method=method, json=body, headers=headers)


def assert_error(resp, status: int | tuple[int, ...], ids: tuple[str, ...] = (), prop: str = ""):
    """A Redfish error body: Base MessageIds, the expected one among them, the property named."""
    statuses = (status,) if isinstance(status, int) else status
    assert resp.status_code in statuses, (resp.status_code, resp.get_data(as_text=True)[:500])
    error = resp.get_json()["error"]
    infos = error["@Message.ExtendedInfo"]
    assert infos and all(BASE_ID.match(m["MessageId"]) for m in infos)
    assert error["code"] == infos[0]["MessageId"]
    found = [m["MessageId"].rsplit(".", 1)[-1] for m in infos]
    if ids:
        assert set(found) & set(ids), found
    if prop:
        assert prop in [p for m in infos for p in m["RelatedProperties"]], infos


def pointer(*parts: str) -> str:
    return "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


# -- malformed bodies ---------------------------------------------------------------------------


def _not_an_object(raw: bytes) -> bool:
    if not raw.strip():
        return False  # an empty body is "no parameters", a valid EjectMedia
    try:
        return not isinstance(json.loads(raw), dict)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return True


bodies = (
    st.binary(max_size=64)
    | st.text(max_size=64).map(str.encode)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n)
    | st.sampled_from([b"{", b'{"Image": }', b"{'a': 1}", b'{"a":1,}', b"\xff\xfe{", b"NaN"])
).filter(_not_an_object)


@FUZZ
@given(endpoint=st.sampled_from(sorted(WRITES)), raw=bodies)
def test_body_that_is_not_a_json_object(client, store, seeded, endpoint, raw):
    method, path = WRITES[endpoint]
    resp = send(client, method, path, raw=raw)
    assert_error(resp, 400, ("MalformedJSON", "UnrecognizedRequestBody"))
    assert snapshot(store) == seeded


@pytest.mark.parametrize("endpoint", sorted(WRITES))
def test_deeply_nested_json_is_malformed_not_a_crash(client, store, seeded, endpoint):
    method, path = WRITES[endpoint]
    raw = b'{"a": ' + b"[" * 30000 + b"]" * 30000 + b"}"
    assert_error(send(client, method, path, raw=raw), 400, ("MalformedJSON",))
    assert snapshot(store) == seeded


@FUZZ
@given(
    endpoint=st.sampled_from(sorted(WRITES)),
    content_type=st.sampled_from(["text/plain", "application/xml", "multipart/form-data"]),
)
def test_body_with_another_content_type(client, store, seeded, endpoint, content_type):
    method, path = WRITES[endpoint]
    resp = send(client, method, path, raw=b'{"a": 1}', headers={"Content-Type": content_type})
    assert_error(resp, 415, ("HeaderInvalid",))
    assert snapshot(store) == seeded


@pytest.mark.parametrize("endpoint", sorted(WRITES))
@pytest.mark.parametrize("size", [64 * 1024 + 1, 1024 * 1024])
def test_huge_body_is_413(client, store, seeded, endpoint, size):
    method, path = WRITES[endpoint]
    raw = json.dumps({"Image": ISO, "Pad": "x" * size}).encode()
    assert_error(send(client, method, path, raw=raw), 413, ("PayloadTooLarge",))
    assert snapshot(store) == seeded


# -- wrong types, unknown and read-only properties ------------------------------------------------

STRING_PROPS = {
    "insert": [
        "Image",
        "TransferProtocolType",
        "TransferMethod",
        "UserName",
        "Password",
        "MediaType",
    ],
    "reset": ["ResetType"],
    "login": ["UserName", "Password"],
    "patch": ["BootSourceOverrideTarget", "BootSourceOverrideEnabled", "BootSourceOverrideMode"],
}
BOOL_PROPS = {"insert": ["Inserted", "WriteProtected"]}
NULLABLE = {"TransferProtocolType", "TransferMethod", "UserName", "Password", "MediaType"}


@st.composite
def wrong_typed(draw):
    endpoint = draw(st.sampled_from(["insert", "reset", "login", "patch"]))
    strings = STRING_PROPS[endpoint]
    bools = BOOL_PROPS.get(endpoint, [])
    prop = draw(st.sampled_from(strings + bools))
    wants = bool if prop in bools else str
    value = draw(json_values.filter(lambda v: not isinstance(v, wants)))
    if value is None and (prop in NULLABLE or endpoint == "patch"):
        value = 0
    if wants is bool and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return endpoint, prop, value


def _body(endpoint: str, prop: str, value):
    if endpoint == "patch":
        return {"Boot": {prop: value}}, pointer("Boot", prop)
    base = {
        "insert": {"Image": ISO},
        "reset": {},
        "login": {"UserName": "admin", "Password": "x"},
    }[endpoint]
    return {**base, prop: value}, pointer(prop)


@FUZZ
@given(case=wrong_typed())
def test_wrong_type_names_the_property(client, store, seeded, case):
    endpoint, prop, value = case
    body, related = _body(endpoint, prop, value)
    method, path = WRITES[endpoint]
    resp = send(client, method, path, body=body)
    assert_error(
        resp,
        400,
        ("PropertyValueTypeError", "ActionParameterValueTypeError"),
        related,
    )
    assert snapshot(store) == seeded


KNOWN = {
    "insert": set(STRING_PROPS["insert"]) | set(BOOL_PROPS["insert"]),
    "reset": {"ResetType"},
    "eject": set(),
    "patch": {"Boot"},
    "boot": set(STRING_PROPS["patch"]) | {"HttpBootUri"},
}
names = st.text(min_size=1, max_size=30) | st.sampled_from(
    ["Oem", "../x", "a/b~c", "\u00e9\u4e2d", "\x00"]
)


@FUZZ
@given(
    endpoint=st.sampled_from(["insert", "reset", "eject", "patch", "boot"]),
    name=names,
    value=json_values,
)
def test_unknown_property_is_named(client, store, seeded, endpoint, name, value):
    if name in KNOWN[endpoint] or (endpoint in ("patch", "boot") and "@" in name):
        return
    if endpoint == "boot":
        body, related, path = {"Boot": {name: value}}, pointer("Boot", name), SYS_URI
        method = "PATCH"
    else:
        base = {"insert": {"Image": ISO}, "reset": {"ResetType": "On"}}.get(endpoint, {})
        body, related = {**base, name: value}, pointer(name)
        method, path = WRITES[endpoint]
    resp = send(client, method, path, body=body)
    assert_error(resp, 400, ("PropertyUnknown", "ActionParameterUnknown"), related)
    assert snapshot(store) == seeded


@FUZZ
@given(data=st.data(), value=json_values)
def test_read_only_properties_are_refused(client, store, seeded, data, value):
    current = client.get(SYS_URI, headers=ADMIN).get_json()
    nested = data.draw(st.booleans())
    if nested:
        name = data.draw(st.sampled_from(sorted(k for k in current["Boot"] if "@" in k)))
        body, related = {"Boot": {name: value}}, pointer("Boot", name)
    else:
        name = data.draw(st.sampled_from(sorted(k for k in current if k != "Boot")))
        body, related = {name: value}, pointer(name)
    resp = send(client, "PATCH", SYS_URI, body=body)
    assert_error(resp, 400, ("PropertyNotWritable",), related)
    assert snapshot(store) == seeded


@FUZZ
@given(
    image=st.text(max_size=80)
    | st.sampled_from(
        [
            "http://[::1",
            "http://h:99999/x.iso",
            "http://u:p@h:99999/x.iso",
            "http://a b/x.iso",
            "http://\x00/x.iso",
            "http:\\\\evil\\x.iso",
            "http://evil\\@allowed/x.iso",
            "file:///etc/passwd",
            "gopher://h/x",
            "ftp://h/x.iso",
            "//h/x.iso",
            "http:///x.iso",
            "http://\u0435vil.example/x.iso",
            "http://" + "a" * 5000 + "/x.iso",
        ]
    )
)
def test_bad_image_url_is_refused(client, store, seeded, image):
    if parse(image) is not None:
        return
    resp = send(client, "POST", INSERT_URI, body={"Image": image})
    assert_error(resp, 400, ("ActionParameterValueFormatError",), "#/Image")
    assert snapshot(store) == seeded


# -- ids and methods ------------------------------------------------------------------------------

TRICKY_IDS = [
    "..",
    "%2e%2e",
    "%2E%2E%2F%2E%2E",
    "%00",
    f"{SYS}%00",
    f"{SYS}%2F..",
    "lab-b.other-0%2F..%2F" + SYS,
    "%252e%252e",
    "\u2024\u2024",
    "\u00e9\u4e2d\U0001f600",
    "x" * 3000,
    ".",
    "%20",
    "lab-a.",
    ".ostest-master-0",
]


def _templates(app) -> list[str]:
    return sorted({r.rule for r in app.url_map.iter_rules() if "<" in r.rule})


def _fill(template: str, value: str) -> str:
    real = {"system_id": SYS, "device": "Cd", "member_id": "CPU1", "registry_id": "Base.1.22.1"}
    slots = re.findall(r"<([^>]+)>", template)
    # One slot gets the tricky value, the others stay real so the lookup reaches that slot.
    target = slots[-1]
    path = template
    for slot in slots:
        path = path.replace(f"<{slot}>", value if slot == target else real.get(slot, "x"))
    return path


ids = st.sampled_from(TRICKY_IDS) | st.text(min_size=1, max_size=40).map(
    lambda s: quote(s, safe="")
)


@FUZZ
@given(data=st.data(), tricky=ids, user=st.sampled_from(["admin", "operator", "labeled"]))
def test_tricky_ids_are_404(app, client, store, seeded, data, tricky, user):
    template = data.draw(st.sampled_from(_templates(app)))
    path = _fill(template, tricky)
    methods = sorted(m for r in app.url_map.iter_rules() if r.rule == template for m in r.methods)
    method = data.draw(st.sampled_from([m for m in methods if m not in ("HEAD", "OPTIONS")]))
    body = {"ResetType": "On"} if path.endswith("Reset") else {"Image": ISO}
    if method in ("GET", "DELETE"):
        body = None
    resp = client.open(path, method=method, json=body, headers=basic(user))
    if resp.status_code < 400:
        # Only a value that still names the real resource may succeed (e.g. "CPU1" -> CPU1).
        assert method == "GET", (path, resp.status_code)
        return
    assert_error(
        resp, (404, 405), ("ResourceNotFound", "ResourceMissingAtURI", "OperationNotAllowed")
    )
    assert snapshot(store) == seeded


def test_wrong_method_at_every_route_is_405_with_allow(app, client, store, seeded):
    adapter = app.url_map.bind("localhost")
    tried = 0
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<([^>]+)>", lambda m: {"device": "Cd"}.get(m.group(1), SYS), rule.rule)
        if "<" in rule.rule and "Sessions" in rule.rule:
            path = rule.rule.replace("<session_id>", "0123456789abcdef")
        allowed = adapter.allowed_methods(path)
        for method in ("GET", "PUT", "POST", "PATCH", "DELETE"):
            if method in allowed:
                continue
            resp = client.open(path, method=method, json={}, headers=ADMIN)
            assert_error(resp, 405, ("OperationNotAllowed",))
            assert set(resp.headers["Allow"].replace(" ", "").split(",")) == set(allowed), path
            tried += 1
    assert tried > 100
    assert snapshot(store) == seeded


def test_every_problem_is_reported_and_nothing_changes(client, store, seeded):
    body = {"Boot": {"BootSourceOverrideTarget": "Floppy", "Colour": 1}, "PowerState": "On"}
    resp = send(client, "PATCH", SYS_URI, body=body)
    assert_error(resp, 400)
    related = {
        p for m in resp.get_json()["error"]["@Message.ExtendedInfo"] for p in m["RelatedProperties"]
    }
    assert related == {"#/Boot/BootSourceOverrideTarget", "#/Boot/Colour", "#/PowerState"}
    assert client.get(CD_URI, headers=ADMIN).get_json()["Image"] == ISO
    assert snapshot(store) == seeded
