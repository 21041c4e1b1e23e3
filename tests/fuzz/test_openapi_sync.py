"""app/openapi.yaml describes exactly the routes Flask serves, with the same methods."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from app import create_app
from fleetfish.settings import Settings

SPEC = Path(__file__).resolve().parents[2] / "app" / "openapi.yaml"
# Flask adds these to every rule; the spec lists GET only (HEAD is served wherever GET is).
IMPLICIT = {"HEAD", "OPTIONS"}
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def spec() -> dict:
    return yaml.safe_load(SPEC.read_text())


def flask_routes() -> dict[str, set[str]]:
    app = create_app(Settings(redis_url="redis://127.0.0.1:1/0"))
    routes: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        routes.setdefault(path, set()).update(m for m in rule.methods if m not in IMPLICIT)
        assert "GET" not in rule.methods or "HEAD" in rule.methods, rule.rule
    return routes


def spec_routes() -> dict[str, set[str]]:
    return {
        path: {m.upper() for m in item if m in HTTP_METHODS}
        for path, item in spec()["paths"].items()
    }


def test_every_route_is_in_the_spec_and_vice_versa():
    served, described = flask_routes(), spec_routes()
    assert sorted(set(served) - set(described)) == [], "served but not in app/openapi.yaml"
    assert sorted(set(described) - set(served)) == [], "in app/openapi.yaml but not served"


def test_methods_match():
    served, described = flask_routes(), spec_routes()
    mismatched = {p: (served[p], described[p]) for p in served if served[p] != described.get(p)}
    assert mismatched == {}


def test_every_path_parameter_is_declared():
    for path, item in spec()["paths"].items():
        names = set(re.findall(r"{([^}]+)}", path))
        for method, op in item.items():
            if method not in HTTP_METHODS:
                continue
            params = [*item.get("parameters", []), *op.get("parameters", [])]
            declared = {_resolve(p)["name"] for p in params if _resolve(p)["in"] == "path"}
            assert declared == names, (method, path)


def test_error_responses_use_the_redfish_error_schema():
    error_ref = "#/components/responses/Error"
    for path, item in spec()["paths"].items():
        for method, op in item.items():
            if method not in HTTP_METHODS:
                continue
            assert op["responses"].get("4XX") == {"$ref": error_ref}, (method, path)


def _resolve(obj: dict) -> dict:
    if "$ref" not in obj:
        return obj
    node = spec()
    for part in obj["$ref"].lstrip("#/").split("/"):
        node = node[part]
    return node
