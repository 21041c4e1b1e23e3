"""Image credentials and login passwords are never logged and never shown by any GET."""

from __future__ import annotations

import logging

import requests

from tests.api.api_gunicorn import running_gunicorn
from tests.api.api_helpers import ADMIN, CD_URI, INSERT_URI, PASSWORDS, SYS, Queues

URL_USER, URL_PW = "urluser", "url-secret-7731"
BODY_USER, BODY_PW = "bodyuser", "body-secret-4409"
SECRETS = (URL_PW, BODY_PW, BODY_USER, URL_USER)


def _get_everything(client, location: str) -> str:
    task_id = location.rsplit("/", 1)[-1]
    paths = [
        CD_URI,
        f"/redfish/v1/Managers/{SYS}/VirtualMedia/Cd",
        f"/redfish/v1/Systems/{SYS}/VirtualMedia",
        "/redfish/v1/TaskService/Tasks",
        f"/redfish/v1/TaskService/Tasks/{task_id}",
        location,
    ]
    texts = []
    for path in paths:
        resp = client.get(path, headers=ADMIN)
        assert resp.status_code in (200, 202), path
        texts.append(resp.get_data(as_text=True))
    return "\n".join(texts)


def test_url_credentials_are_moved_out_of_the_url(client, store, systems, queues, caplog):
    caplog.set_level(logging.DEBUG)
    image = f"https://{URL_USER}:{URL_PW}@192.0.2.10/x.iso"
    resp = client.post(INSERT_URI, json={"Image": image}, headers=ADMIN)
    assert resp.status_code == 202
    shown = _get_everything(client, resp.headers["Location"]) + resp.get_data(as_text=True)
    for secret in (URL_USER, URL_PW):
        assert secret not in shown
        assert secret not in caplog.text
    assert client.get(CD_URI, headers=ADMIN).get_json()["Image"] == "https://192.0.2.10/x.iso"
    # The workers get them the same way as UserName/Password, never inside the queued URL.
    assert store.media_credentials(SYS) == {"username": URL_USER, "password": URL_PW}
    assert store.get_media(SYS)["image"] == "https://192.0.2.10/x.iso"
    raw_messages = str(queues.r.lrange("fleetfish.media", 0, -1))
    assert URL_PW not in raw_messages and URL_PW not in str(queues.messages("fleetfish.media"))


def test_body_credentials_never_shown_or_logged(client, store, systems, caplog):
    caplog.set_level(logging.DEBUG)
    body = {"Image": "https://192.0.2.10/x.iso", "UserName": BODY_USER, "Password": BODY_PW}
    resp = client.post(INSERT_URI, json=body, headers=ADMIN)
    assert resp.status_code == 202
    shown = _get_everything(client, resp.headers["Location"]) + resp.get_data(as_text=True)
    for secret in (BODY_USER, BODY_PW):
        assert secret not in shown
        assert secret not in caplog.text
    assert store.media_credentials(SYS) == {"username": BODY_USER, "password": BODY_PW}


def test_refused_urls_do_not_echo_credentials(client, systems, caplog):
    caplog.set_level(logging.DEBUG)
    for image in (f"ftp://{URL_USER}:{URL_PW}@h/x.iso", f"http://{URL_USER}:{URL_PW}@h:99999/x"):
        resp = client.post(INSERT_URI, json={"Image": image}, headers=ADMIN)
        assert resp.status_code == 400
        assert URL_PW not in resp.get_data(as_text=True)
    assert URL_PW not in caplog.text


def test_login_passwords_are_not_logged(client, systems, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-password-5521"
    client.post(
        "/redfish/v1/SessionService/Sessions", json={"UserName": "admin", "Password": wrong}
    )
    client.get("/redfish/v1/Systems", headers={"Authorization": "Basic YWRtaW46d3JvbmctcHc="})
    ok = client.post(
        "/redfish/v1/SessionService/Sessions",
        json={"UserName": "viewer", "Password": PASSWORDS["viewer"]},
    )
    token = ok.headers["X-Auth-Token"]
    client.get("/redfish/v1/Systems", headers={"X-Auth-Token": token})
    for secret in (wrong, "wrong-pw", PASSWORDS["viewer"], PASSWORDS["admin"], token):
        assert secret not in caplog.text
    assert PASSWORDS["viewer"] not in ok.get_data(as_text=True)


def test_gunicorn_logs_hold_no_secret(redis_url, users_file, systems, tmp_path):
    """The real server's output at debug level, access log included."""
    env = {"FLEETFISH_LOG_LEVEL": "debug"}
    with running_gunicorn(redis_url, users_file, tmp_path, **env) as (port, log_path):
        base = f"http://127.0.0.1:{port}"
        auth = ("admin", PASSWORDS["admin"])
        image = f"https://{URL_USER}:{URL_PW}@192.0.2.10/x.iso"
        body = {"Image": image, "UserName": BODY_USER, "Password": BODY_PW}
        reply = requests.post(base + INSERT_URI, json=body, auth=auth, timeout=10)
        assert reply.status_code == 202
        for path in (CD_URI, reply.headers["Location"]):
            text = requests.get(base + path, auth=auth, timeout=10).text
            assert not any(s in text for s in SECRETS)
        requests.get(base + "/redfish/v1/Systems", auth=("admin", "bad-pw-0042"), timeout=10)
        text = log_path.read_text()
    assert "fleetfish.api access" in text and "InsertMedia" in text
    for secret in (*SECRETS, "bad-pw-0042", PASSWORDS["admin"]):
        assert secret not in text
    assert Queues(redis_url).names("fleetfish.media") == ["media.import"]
