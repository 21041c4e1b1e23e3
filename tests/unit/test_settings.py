"""Settings a service refuses to start with, before it can lose track of a running task."""

from __future__ import annotations

import pytest

from fleetfish.settings import Settings


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
