"""Label selectors as Kubernetes reads them, in the one parser the API scope, the CLI and the
lab simulator share."""

from __future__ import annotations

import pytest

from fleetfish.selectors import matches, parse_selector

LABELS = {"role": "master", "app.kubernetes.io/part-of": "fleetfish-lab", "empty": ""}


def selects(selector: str, labels: dict[str, str] = LABELS) -> bool:
    return matches(parse_selector(selector), labels)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("   ", True),
        ("role=master", True),
        ("role==master", True),
        ("role = master", True),
        ("role=worker", False),
        ("role!=worker", True),
        ("role!=master", False),
        ("missing!=x", True),  # != and notin match an object without the label
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("missing=x", False),
        ("role in (worker, master)", True),
        ("role notin (worker,master)", False),
        ("role", True),
        ("!role", False),
        ("!missing", True),
        ("empty=", True),
        ("empty", True),
        ("missing=", False),  # equality needs the label, even to an empty value
        ("app.kubernetes.io/part-of=fleetfish-lab,role=master", True),
        ("app.kubernetes.io/part-of=fleetfish-lab,role=worker", False),
    ],
)
def test_selector_matches_as_kubernetes_does(selector, expected):
    assert selects(selector) is expected


@pytest.mark.parametrize(
    "selector",
    [
        "a in (b",  # unclosed set
        "a in ()",  # empty set
        "a=b,",  # empty requirement after a comma
        ",a=b",
        "a=b,,c=d",
        "a=b/c",  # a value has no '/'
        "a/b/c=d",  # one prefix at most
        "Upper.Prefix/a=b",  # the prefix is a lower-case DNS subdomain
        "-a=b",  # names start and end alphanumeric
        "a=b-",
        "a=" + "x" * 64,  # values are at most 63 characters
        "x" * 64,
        "a=b=c",
        "!!a",
        "rôle=master",
    ],
)
def test_invalid_selectors_are_refused_naming_the_part(selector):
    with pytest.raises(ValueError, match="invalid label selector"):
        parse_selector(selector)


def test_requirements_are_normalised():
    assert parse_selector("a==b, c!=d, e in (f, g), !h, i") == [
        ("a", "=", ("b",)),
        ("c", "!=", ("d",)),
        ("e", "in", ("f", "g")),
        ("h", "!exists", ()),
        ("i", "exists", ()),
    ]
