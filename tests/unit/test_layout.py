"""The package layout holds: one-way dependencies between the product's top-level packages,
read from the source (no module is imported), and the Celery task names on the wire."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "tasks", "workers", "fleetfish")
# The names messages in Redis carry: a rename would strand messages queued across an upgrade.
WIRE_NAMES = {
    "media.import",
    "media.attach",
    "media.release",
    "media.failed",
    "media.eject",
    "power.reset",
    "power.verify",
    "boot.apply",
    "boot.revert_once",
}


def product_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the product packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported_names(path: Path, module: str) -> set[str]:
    """Every module an ``import`` anywhere in the file names (also inside functions)."""
    names = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            # ``from fleetfish import wire`` imports the module fleetfish.wire.
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def package_edges() -> dict[str, dict[str, list[str]]]:
    """{package: {imported top-level name: [importing modules]}} over all product modules."""
    edges: dict[str, dict[str, list[str]]] = {p: {} for p in PACKAGES}
    for module, path in product_modules().items():
        top = module.split(".")[0]
        for name in imported_names(path, module):
            edges[top].setdefault(name.split(".")[0], []).append(module)
    return edges


def ours(edges: dict[str, list[str]], own: str) -> dict[str, list[str]]:
    return {p: sorted(set(m)) for p, m in edges.items() if p in PACKAGES and p != own}


def test_no_cycle_between_top_level_packages():
    edges = {p: set(ours(e, p)) for p, e in package_edges().items()}
    path: list[str] = []

    def visit(package: str) -> None:
        assert package not in path, f"import cycle: {' -> '.join([*path, package])}"
        path.append(package)
        for target in sorted(edges[package]):
            visit(target)
        path.pop()

    for package in PACKAGES:
        visit(package)


def test_dependencies_point_one_way():
    edges = package_edges()
    assert set(ours(edges["app"], "app")) <= {"fleetfish"}, ours(edges["app"], "app")
    assert ours(edges["fleetfish"], "fleetfish") == {}
    assert "tasks" not in ours(edges["workers"], "workers"), ours(edges["workers"], "workers")


def test_only_the_kubernetes_adapter_imports_kubernetes():
    importers = sorted(
        module
        for module, path in product_modules().items()
        if any(n.split(".")[0] == "kubernetes" for n in imported_names(path, module))
    )
    assert importers == ["workers.kubevirt"]


def _declared_task_names() -> dict[str, str]:
    """Celery task name -> module, from every ``@shared_task(name=...)`` in tasks/."""
    declared = {}
    for module, path in product_modules().items():
        if not module.startswith("tasks."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "shared_task":
                for kw in node.keywords:
                    if kw.arg == "name":
                        declared[kw.value.value] = module
    return declared


def _include_list() -> list[str]:
    tree = ast.parse((REPO / "workers" / "celery_app.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Celery":
            for kw in node.keywords:
                if kw.arg == "include":
                    return [elt.value for elt in kw.value.elts]
    raise AssertionError("workers/celery_app.py names no include list")


def test_task_names_on_the_wire_are_declared_and_loaded_by_the_worker():
    declared = _declared_task_names()
    assert set(declared) == WIRE_NAMES
    # The worker app loads the modules by string (configuration, not an import).
    assert set(declared.values()) <= set(_include_list()) <= set(product_modules())


def test_the_wire_module_sends_only_declared_names():
    tree = ast.parse((REPO / "fleetfish" / "wire.py").read_text())
    sent = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "signature"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert sent and sent <= WIRE_NAMES


def _layout_rows() -> dict[str, str]:
    """{directory: its cell} from the Layout table of docs/architecture.md."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`") and cells[0].endswith("/`"):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def test_the_layout_table_lists_every_product_module_and_no_other():
    rows = _layout_rows()
    for directory in {str(p.relative_to(REPO).parent) + "/" for p in product_modules().values()}:
        files = {p.name for p in (REPO / directory).glob("*.py") if p.name != "__init__.py"}
        if not files:
            continue  # a package of packages (tasks/)
        assert directory in rows, f"docs/architecture.md has no Layout row for {directory}"
        cell = rows[directory].split("`")
        listed = {n for n in cell if n.endswith(".py") and "/" not in n} - {"__init__.py"}
        assert listed == files, f"{directory}: listed {sorted(listed)}, on disk {sorted(files)}"


def test_paths_named_in_the_architecture_doc_exist():
    text = (REPO / "docs" / "architecture.md").read_text()
    named = {
        word
        for word in text.split("`")
        if "/" in word and " " not in word and word.split("/")[0] in (*PACKAGES, "tests", "lab")
    }
    assert named, "no paths found in docs/architecture.md"
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert missing == []
