"""The SSRF guard on InsertMedia: http/https only, the default refusals, FLEETFISH_IMAGE_ALLOWLIST."""

from __future__ import annotations

import pytest
from security_helpers import error_ids

from app import create_app
from app.image_url import host_allowed, parse
from fleetfish.image_policy import refusal
from fleetfish.settings import Settings
from tests.api.api_helpers import ADMIN, INSERT_URI, SYS

ALLOW = ("iso.example.com", ".images.example.org", "192.0.2.0/24", "2001:db8::/32", "10.1.2.3")


@pytest.fixture
def guarded(redis_url, users_file, systems):
    settings = Settings(redis_url=redis_url, users_file=users_file, image_allowlist=ALLOW)
    return create_app(settings).test_client()


@pytest.mark.parametrize(
    "image",
    [
        "file:///etc/passwd",
        "ftp://iso.example.com/x.iso",
        "gopher://iso.example.com:70/x",
        "dict://iso.example.com:11211/stats",
        "data:text/plain,hello",
        "javascript:alert(1)",
        "//iso.example.com/x.iso",
        "iso.example.com/x.iso",
        "http:///x.iso",
        "http:\\\\iso.example.com\\x.iso",
    ],
)
def test_only_http_and_https_urls(client, systems, store, image):
    resp = client.post(INSERT_URI, json={"Image": image}, headers=ADMIN)
    assert resp.status_code == 400
    assert error_ids(resp) == ["ActionParameterValueFormatError"]
    assert store.get_media(SYS).get("image", "") == ""


@pytest.mark.parametrize(
    "image",
    [
        "http://iso.example.com/x.iso",
        "HTTPS://ISO.EXAMPLE.COM/x.iso",
        "http://iso.example.com./x.iso",  # trailing dot: the same name
        "https://a.images.example.org/x.iso",
        "https://a.b.images.example.org:8443/x.iso",
        "http://192.0.2.77/x.iso",
        "http://10.1.2.3:8080/x.iso",  # a single address is a /32
        "http://[2001:db8::10]/x.iso",
        "http://[::ffff:192.0.2.5]/x.iso",  # IPv4-mapped IPv6 is the IPv4 address
        "http://evil.example.net@iso.example.com/x.iso",  # user info is not the host
        "http://u:p@192.0.2.1/x.iso",
    ],
)
def test_allow_list_admits(guarded, image):
    assert guarded.post(INSERT_URI, json={"Image": image}, headers=ADMIN).status_code == 202


@pytest.mark.parametrize(
    "image",
    [
        "http://iso.example.com@evil.example.net/x.iso",  # the host is evil.example.net
        "http://iso.example.com:80@evil.example.net/x.iso",
        "http://iso.example.com%40evil.example.net/x.iso",
        "http://iso.example.com.evil.example.net/x.iso",
        "http://xiso.example.com/x.iso",
        "http://images.example.org.evil.net/x.iso",
        "http://evilimages.example.org/x.iso",  # ".images.example.org" needs the dot
        "http://198.51.100.1/x.iso",
        "http://192.0.3.1/x.iso",
        "http://127.0.0.1/x.iso",
        "http://[::1]/x.iso",
        "http://[2001:db9::1]/x.iso",
        "http://[::ffff:127.0.0.1]/x.iso",
        "http://169.254.169.254/latest/meta-data/",
        # Names are never resolved: a name whose address is inside a listed CIDR is refused,
        # as are other spellings of an address that a fetcher might resolve or parse.
        "http://localhost/x.iso",
        "http://2130706433/x.iso",
        "http://0x7f.1/x.iso",
        "http://0300.0000.0002.0001/x.iso",
        "http://192.0.2.1.nip.io/x.iso",
        "http://evil.example.net#@iso.example.com/x.iso",
        "http://evil.example.net\\@iso.example.com/x.iso",
    ],
)
def test_allow_list_refuses(guarded, store, image):
    resp = guarded.post(INSERT_URI, json={"Image": image}, headers=ADMIN)
    assert resp.status_code == 400, image
    assert error_ids(resp)[0] in ("ActionParameterValueError", "ActionParameterValueFormatError")
    assert store.get_media(SYS).get("image", "") == ""


DEFAULT_REFUSED = [
    "http://169.254.169.254/latest/meta-data",  # the cloud metadata service
    "http://[fe80::1]/x.iso",
    "http://[::1]:6379/x.iso",  # Redis on this host
    "http://127.0.0.1/x.iso",
    "http://127.1.2.3:5555/x.iso",
    "http://0.0.0.0:8000/x.iso",
    "http://[::]/x.iso",
    "http://localhost/x.iso",
    "http://LOCALHOST./x.iso",
    "http://api.localhost/x.iso",
    "http://[::ffff:127.0.0.1]/x.iso",  # IPv4-mapped loopback
    "http://[::ffff:169.254.169.254]/x.iso",
    "http://metadata.google.internal/computeMetadata/v1/",
]


@pytest.mark.parametrize("image", DEFAULT_REFUSED)
def test_default_policy_refuses_local_and_metadata_hosts(client, systems, store, image):
    """No configuration at all: the addresses of this host and of the metadata service."""
    resp = client.post(INSERT_URI, json={"Image": image}, headers=ADMIN)
    assert resp.status_code == 400, image
    assert error_ids(resp) == ["ActionParameterValueError"]
    info = resp.get_json()["error"]["@Message.ExtendedInfo"][0]
    assert info["RelatedProperties"] == ["#/Image"]
    host = parse(image).host
    assert f"image host {host} is refused" in info["Resolution"]
    assert store.get_media(SYS).get("image", "") == ""


@pytest.mark.parametrize(
    "image",
    [
        "http://iso.example.com/x.iso",
        "https://203.0.113.7:8443/boot.iso",
        "http://[2001:db8::7]/x.iso",
        "http://10.20.30.40/x.iso",  # a private address is not refused without a cluster CIDR
        "http://isoserver:8081/x.iso",
    ],
)
def test_default_policy_accepts_other_hosts(client, systems, image):
    assert client.post(INSERT_URI, json={"Image": image}, headers=ADMIN).status_code == 202


def test_own_services_and_cluster_cidrs_are_refused(redis_url, users_file, systems):
    settings = Settings(
        redis_url=redis_url,
        users_file=users_file,
        bind="10.0.0.5",
        image_deny=("fleetfish-flower", "10.96.0.0/12", "10.128.0.0/14"),
        kubernetes_service_host="172.30.0.1",
    )
    guarded_client = create_app(settings).test_client()
    for image in (
        "http://10.0.0.5:8000/redfish/v1/",  # the API's own bind address
        "http://fleetfish-flower:5555/api/workers",
        "http://fleetfish-flower.fleetfish.svc.cluster.local:5555/",
        "http://10.96.0.10/x.iso",  # service CIDR
        "http://10.130.2.7/x.iso",  # pod CIDR
        "https://172.30.0.1/api",  # the cluster API (KUBERNETES_SERVICE_HOST)
    ):
        resp = guarded_client.post(INSERT_URI, json={"Image": image}, headers=ADMIN)
        assert resp.status_code == 400, image
        assert error_ids(resp) == ["ActionParameterValueError"]
    for image in ("http://10.0.0.6/x.iso", "http://flower.example.com/x.iso"):
        resp = guarded_client.post(INSERT_URI, json={"Image": image}, headers=ADMIN)
        assert resp.status_code == 202, image


def test_redis_host_from_redis_url_is_refused():
    settings = Settings(redis_url="redis://:secret@fleetfish-redis:6379/0")
    assert refusal("fleetfish-redis", settings)
    assert refusal("fleetfish-redis.fleetfish.svc", settings)
    assert not refusal("fleetfish-redis.example.com", settings)
    assert not refusal("iso.example.com", settings)


def test_settings_from_env_read_the_deny_list():
    env = {"FLEETFISH_IMAGE_DENY": "10.96.0.0/12, flower", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    settings = Settings.from_env(env)
    assert settings.image_deny == ("10.96.0.0/12", "flower")
    assert settings.kubernetes_service_host == "10.96.0.1"
    assert refusal("flower", settings) and refusal("10.100.0.1", settings)


@pytest.mark.parametrize(
    "image", ["http://127.0.0.1:8081/x.iso", "http://[::1]/x.iso", "http://169.254.169.254/x"]
)
def test_an_explicitly_listed_local_address_is_allowed(redis_url, users_file, systems, image):
    """The lab serves its ISOs on 127.0.0.1 and lists it; listing is the only way in."""
    allow = ("127.0.0.1", "::1", "169.254.169.254")
    settings = Settings(redis_url=redis_url, users_file=users_file, image_allowlist=allow)
    resp = create_app(settings).test_client().post(INSERT_URI, json={"Image": image}, headers=ADMIN)
    assert resp.status_code == 202


def test_matching_rules():
    assert host_allowed("iso.example.com", ALLOW)
    assert not host_allowed("example.com", (".example.com",))
    assert host_allowed("a.example.com", (".example.com",))
    assert host_allowed("192.0.2.1", ("192.0.2.0/24",))
    assert not host_allowed("192.0.2.1", ("192.0.2.1.example.com",))
    assert not host_allowed("fe80::1", ("192.0.2.0/24",))
    assert not host_allowed("anything", ("not a cidr/99", ""))
    assert parse("http://u%40x:p%3Aw@h/x.iso").username == "u@x"
    assert parse("http://u%40x:p%3Aw@h/x.iso").password == "p:w"
    assert parse("http://u:p@h/x.iso").url == "http://h/x.iso"
    assert parse("http://h:65536/x.iso") is None
    assert parse("http://[::1/x.iso") is None
    assert parse("http://\u0435xample.com/x.iso") is None  # Cyrillic e: use punycode
    assert parse("http://xn--xample-2of.com/x.iso") is not None
