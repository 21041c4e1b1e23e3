"""Settings a service refuses to start with, before it can lose track of a running task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleetfish.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_tasks_outlive_the_longest_import_by_default():
    defaults = Settings()
    assert defaults.task_result_ttl > defaults.import_timeout


def test_a_task_ttl_shorter_than_the_import_timeout_is_refused_with_both_names():
    env = {"FLEETFISH_TASK_RESULT_TTL": "600", "FLEETFISH_IMPORT_TIMEOUT": "1800"}
    with pytest.raises(ValueError) as refused:
        Settings.from_env(env)
    assert "FLEETFISH_TASK_RESULT_TTL" in str(refused.value)
    assert "FLEETFISH_IMPORT_TIMEOUT" in str(refused.value)


def test_a_longer_import_timeout_with_a_longer_ttl_is_accepted():
    env = {"FLEETFISH_TASK_RESULT_TTL": "10000", "FLEETFISH_IMPORT_TIMEOUT": "3600"}
    settings = Settings.from_env(env)
    assert (settings.task_result_ttl, settings.import_timeout) == (10000, 3600)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FLEETFISH_REQUIRE_TLS", "enabled"),  # read as off until now: credentials over plain HTTP
        ("FLEETFISH_MEDIA_ALLOW_UNVERIFIED", "ja"),
        ("FLEETFISH_TASK_EVENTS", "2"),
    ],
)
def test_a_switch_that_is_neither_on_nor_off_is_refused_with_its_name(name, value):
    with pytest.raises(ValueError) as refused:
        Settings.from_env({name: value})
    assert name in str(refused.value)
    assert repr(value) in str(refused.value)


@pytest.mark.parametrize(
    ("name", "value", "what"),
    [
        ("FLEETFISH_PORT", "80a", "a whole number"),
        ("FLEETFISH_IMPORT_TIMEOUT", "30m", "a whole number"),
        ("FLEETFISH_DV_SIZE_MARGIN", "130%", "a number"),
    ],
)
def test_a_number_that_does_not_parse_is_refused_with_its_name(name, value, what):
    with pytest.raises(ValueError) as refused:
        Settings.from_env({name: value})
    assert f"{name} must be {what}, not {value!r}" in str(refused.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), ("Yes", True), (" on ", True), ("0", False), ("off", False),
     ("FALSE", False), ("no", False), ("", False)],
)  # fmt: skip
def test_switches_read_the_usual_spellings_of_on_and_off(value, expected):
    assert Settings.from_env({"FLEETFISH_REQUIRE_TLS": value}).require_tls is expected


def gunicorn_settings(env: dict[str, str]) -> subprocess.CompletedProcess:
    """app/gunicorn_conf.py loaded in a fresh interpreter, as gunicorn loads it, with ``env``."""
    probe = (
        "import json, runpy; conf = runpy.run_path('app/gunicorn_conf.py'); "
        "print(json.dumps({k: conf[k] for k in ('preload_app', 'workers', 'read_timeout')}))"
    )
    return subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_api_server_settings_read_switches_and_numbers_as_the_services_do():
    done = gunicorn_settings({"FLEETFISH_API_PRELOAD": "off", "FLEETFISH_API_WORKERS": "3"})
    assert done.returncode == 0, done.stderr
    # "off" kept the preload on until now: only "0" turned it off.
    assert json.loads(done.stdout) == {"preload_app": False, "workers": 3, "read_timeout": 10}


def test_an_api_server_setting_that_does_not_parse_is_refused_with_its_name():
    done = gunicorn_settings({"FLEETFISH_API_WORKERS": "two"})
    assert done.returncode != 0
    assert "FLEETFISH_API_WORKERS must be a whole number, not 'two'" in done.stderr


def test_an_unknown_log_level_is_refused_with_the_levels_there_are():
    with pytest.raises(ValueError) as refused:
        Settings.from_env({"FLEETFISH_LOG_LEVEL": "verbose"})
    assert "FLEETFISH_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in str(
        refused.value
    )
    assert Settings.from_env({"FLEETFISH_LOG_LEVEL": "warning"}).log_level == "WARNING"
