"""`python -m lab --help` explains the settings and starts nothing."""

import subprocess
import sys

from lab.stack import REPO


def test_help_lists_settings_and_starts_nothing(tmp_path):
    env = {"LAB_VAR_DIR": str(tmp_path / "lab"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "lab", "--help"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "LAB_VMS" in done.stdout and "LAB_IMPORT_SECONDS" in done.stdout
    assert not (tmp_path / "lab").exists()  # nothing started, nothing written


def test_unknown_argument_is_refused(tmp_path):
    env = {"LAB_VAR_DIR": str(tmp_path / "lab"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "lab", "--vms", "5"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "unrecognized arguments" in done.stderr
    assert not (tmp_path / "lab").exists()
