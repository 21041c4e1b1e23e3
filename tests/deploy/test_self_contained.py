"""A clone is self-contained: no code, test or config file reads a path outside the checkout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from deploy_support import ROOT

from app.resources.service_root import SCHEMAS
from tests.conformance import dmtf

# The files that run or configure something (documentation may quote paths of other machines).
CHECKED = ("*.py", "*.sh", "*.cfg", "*.toml", "*.yaml", "*.yml", "*.ini", "Makefile", ".ci/*")
CHECKED += ("Dockerfile",)

# Where a checkout, a home directory or a data folder lives on a host: never a path the code may
# name. In-image paths the Dockerfile and manifests own (/opt/fleetfish, /etc/fleetfish, /data,
# /tmp, /usr/bin, /var/run/secrets) are not host paths and stay allowed.
HOST_ROOTS = ("work", "home", "root", "Users", "mnt", "media", "srv", "scratch", "shared")
OUTSIDE = [
    # An absolute path under one of HOST_ROOTS where a path starts (after a quote, a space, =,
    # (, [, a comma or a colon), not inside a URL path (a Redfish resource or an f-string base
    # followed by one of those words) nor a relative path that contains one.
    re.compile(r"""(?:^|(?<=[\s"'=(\[,:]))/(?:""" + "|".join(HOST_ROOTS) + r")(?=/|\b)"),
    # A sibling folder of the checkout named "shared", however it is spelt.
    re.compile(r"\.\." + r"/shared\b"),
    re.compile(r"""\.parent\s*/\s*["']shared["']"""),
    re.compile(r"\bFLEETFISH_SHARED_DIR\b"),
]


def checked_files() -> list[Path]:
    """The tracked files of CHECKED kinds (git knows them; a tarball without .git is walked)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--", *CHECKED],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout.decode()
        paths = [ROOT / p for p in listed.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        skip = {".venv", "var", ".git"}
        paths = [
            p
            for pattern in CHECKED
            for p in ROOT.rglob(pattern)
            if not skip & set(p.relative_to(ROOT).parts)
        ]
    return sorted(p for p in paths if p.is_file() and p != Path(__file__).resolve())


def outside_references(text: str) -> list[str]:
    """Each line of ``text`` that names a path outside the repository, numbered."""
    return [
        f"{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if any(pattern.search(line) for pattern in OUTSIDE)
    ]


def test_no_file_reads_a_path_outside_the_checkout():
    files = checked_files()
    assert len(files) > 50, "the file list is empty: the check would check nothing"
    found = {
        str(path.relative_to(ROOT)): hits
        for path in files
        if (hits := outside_references(path.read_text(errors="replace")))
    }
    assert found == {}


# What tests/conformance/dmtf.py read before the repository carried its own DMTF data (put
# together from pieces, so this file itself names no such path).
_HOST = "/" + "work"
OLD_DMTF = f"""
    candidates = (
        [Path(os.environ["FLEETFISH_SHARED_DIR"])] if "FLEETFISH_SHARED_DIR" in os.environ else []
    )
    candidates += [REPO.parent / "shared", Path("{_HOST}/shared")]
"""
ALLOWED = """
WORKDIR /opt/fleetfish
token = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
volumeMounts: [{mountPath: /etc/fleetfish/users}, {mountPath: /tmp}, {mountPath: /data}]
#!/usr/bin/env bash
url = f"{base}/redfish/v1/Systems/root/VirtualMedia/home/"
image = f"{iso_base}/media/{name}.iso"
LAB_VAR_DIR = REPO / "var" / "lab" / "work"
reference = "../reference/kubevirt-api.md"
"""


def test_the_rule_catches_the_old_bundle_lookup_and_spares_in_image_paths():
    assert len(outside_references(OLD_DMTF)) == 2  # both lines that chose a bundle
    for each in ('REPO.parent / "shared"', f'Path("{_HOST}/shared")', "FLEETFISH_SHARED_DIR"):
        assert outside_references(each), each
    assert outside_references("cd .." + "/shared && ls") and outside_references('"/home/me/x"')
    assert outside_references("  volumes: [/srv/iso:/iso]") and outside_references(f"cd {_HOST}")
    assert outside_references(ALLOWED) == []


def test_the_vendored_schemas_cover_every_schema_the_service_names():
    """$metadata's schemas must be in the service validator's directory, or it cannot check
    the resources they define (tests/conformance/redfish/README.md says where to get more)."""
    vendored = {p.name for p in (dmtf.DATA / "csdl").glob("*.xml")}
    named = {f"{stem}_v1.xml" for stem, _ in SCHEMAS}
    assert named - vendored == set()
    assert dmtf.PROFILE.is_file()
    assert (dmtf.DATA / "LICENSE-DMTF.md").is_file()
    assert (dmtf.PROFILE.parent / "LICENSE-ironic.txt").is_file()
