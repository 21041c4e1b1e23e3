"""`python -m lab`: --help explains the settings and starts nothing; what it sets for services."""

import subprocess
import sys

from lab.stack import REPO, LabConfig, LabStack


def run_lab(tmp_path, *args, **settings):
    """``python -m lab`` expected to end by itself; a lab that starts instead is stopped."""
    env = {"LAB_VAR_DIR": str(tmp_path / "lab"), "PATH": "/usr/bin:/bin", **settings}
    lab = subprocess.Popen(
        [sys.executable, "-m", "lab", *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        stdout, stderr = lab.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        # SIGTERM, not the kill of a timeout: the lab then stops the services it started.
        lab.terminate()
        stdout, stderr = lab.communicate(timeout=60)
        raise AssertionError(f"the lab started instead of ending:\n{stderr[-2000:]}") from None
    return subprocess.CompletedProcess(lab.args, lab.returncode, stdout, stderr)


def test_help_lists_settings_and_starts_nothing(tmp_path):
    done = run_lab(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert f"LAB_VMS={LabConfig().vms}" in done.stdout
    assert f"LAB_IMPORT_SECONDS={LabConfig().import_seconds:g}" in done.stdout
    assert not (tmp_path / "lab").exists()  # nothing started, nothing written


def test_unknown_argument_is_refused(tmp_path):
    done = run_lab(tmp_path, "--vms", "5")
    assert done.returncode == 2
    assert "unrecognized arguments" in done.stderr
    assert not (tmp_path / "lab").exists()


def test_a_setting_that_is_not_a_number_is_named(tmp_path):
    done = run_lab(tmp_path, LAB_VMS="three")
    assert done.returncode == 2
    assert "LAB_VMS must be a whole number, not 'three'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "lab").exists()


def test_the_lab_sends_task_events_when_it_runs_flower_unless_told_otherwise(tmp_path, monkeypatch):
    def task_events(flower: bool) -> str:
        return LabStack(LabConfig.for_tests(tmp_path, flower=flower)).service_env()[
            "FLEETFISH_TASK_EVENTS"
        ]

    monkeypatch.delenv("FLEETFISH_TASK_EVENTS", raising=False)
    assert (task_events(flower=True), task_events(flower=False)) == ("1", "0")
    monkeypatch.setenv("FLEETFISH_TASK_EVENTS", "1")  # an operator's choice wins
    assert task_events(flower=False) == "1"


def test_the_lab_reads_a_switch_as_the_services_do(monkeypatch):
    # "yes" turns the legacy mode on in the services; the lab read it as off and told them "0".
    monkeypatch.setenv("FLEETFISH_LEGACY_SEQUENTIAL", "yes")
    monkeypatch.setenv("LAB_TLS", "on")
    config = LabConfig.from_env()
    assert (config.legacy_sequential, config.tls) == (True, True)


def test_a_service_setting_the_lab_would_pass_on_unread_is_refused_before_it_starts(tmp_path):
    done = run_lab(tmp_path, FLEETFISH_REQUIRE_TLS="enabled")
    assert done.returncode == 2
    assert "FLEETFISH_REQUIRE_TLS" in done.stderr and "'enabled'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "lab").exists()
