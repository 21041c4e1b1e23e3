"""Derive the Kubernetes RBAC (resource, verb) pairs a client module needs from its source.

Static and over-approximating only where it must: a plural passed through a parameter that
cannot be traced to a constant counts as every plural the module defines, narrowed to the API
group the call names (``*KUBEVIRT``) when it names one. The Role check compares both ways, so
a rule the scan cannot justify is as much a failure as one it finds missing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

# kubernetes client method prefixes -> RBAC verb.
METHOD_VERBS = {
    "get": "get",
    "read": "get",
    "list": "list",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}
CLIENT_METHOD = re.compile(
    r"^(get|read|list|create|replace|patch|delete)_(?:namespaced_|cluster_)?(\w+?)"
    r"(?:_for_all_namespaces)?(_status|_scale)?$"
)
PLURAL_GROUPS = {
    "virtualmachines": "kubevirt.io",
    "virtualmachineinstances": "kubevirt.io",
    "datavolumes": "cdi.kubevirt.io",
    "virtualmachineinstancetypes": "instancetype.kubevirt.io",
    "virtualmachineclusterinstancetypes": "instancetype.kubevirt.io",
    "persistentvolumeclaims": "",
    "secrets": "",
    "configmaps": "",
}
# virt-api subresources: all PUT (update) except the streaming/reading ones.
SUBRESOURCE_VERBS = {
    **dict.fromkeys(
        ["start", "stop", "restart", "migrate", "pause", "unpause", "softreboot", "reset"]
        + ["addvolume", "removevolume", "freeze", "unfreeze", "expand-spec"],
        "update",
    ),
    **dict.fromkeys(["guestosinfo", "console", "vnc", "portforward", "userlist"], "get"),
}
SUBRESOURCE_GROUP = "subresources.kubevirt.io"

Rule = tuple[str, str, str]  # (apiGroup, resource, verb)


def _constants(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _group_tuples(tree: ast.Module) -> dict[str, str]:
    """Module constants like ``KUBEVIRT = ("kubevirt.io", "v1")``: name -> API group."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            first = node.value.elts[0] if node.value.elts else None
            if isinstance(first, ast.Constant) and first.value in PLURAL_GROUPS.values():
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = first.value
    return found


def _named_groups(func: ast.AST, group_tuples: dict[str, str]) -> set[str]:
    """API groups a function passes as ``*GROUP_VERSION`` to the client."""
    return {
        group_tuples[n.value.id]
        for n in ast.walk(func)
        if isinstance(n, ast.Starred)
        and isinstance(n.value, ast.Name)
        and n.value.id in group_tuples
    }


def _plural(node: ast.AST, consts: dict[str, str]) -> str | None:
    value = None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        value = node.value
    elif isinstance(node, ast.Name):
        value = consts.get(node.id)
    elif isinstance(node, ast.Attribute):
        value = consts.get(node.attr)
    return value if value in PLURAL_GROUPS else None


def _snake_plural(snake: str) -> str:
    return snake.replace("_", "") + "s"


def _method_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _call_plurals(call: ast.Call, consts: dict[str, str], params: list[str]) -> tuple[set, set]:
    """Plurals a call names directly, and the enclosing function's parameters it passes on."""
    direct, via = set(), set()
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        plural = _plural(arg, consts)
        if plural:
            direct.add(plural)
        elif isinstance(arg, ast.Name) and arg.id in params:
            via.add(arg.id)
        elif isinstance(arg, ast.Starred):
            continue
    return direct, via


def derive_rules(source: str, callers: list[str] = ()) -> set[Rule]:
    """RBAC rules needed by the client module ``source``; ``callers`` are other modules' sources
    searched for the constants they pass to its methods (e.g. the watcher's ``watch(VM_PLURAL)``)."""
    tree = ast.parse(source)
    consts = _constants(tree)
    group_tuples = _group_tuples(tree)
    all_plurals = {v for v in consts.values() if v in PLURAL_GROUPS}
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    # Which plurals reach each function parameter: from call sites here and in the callers.
    reaching: dict[tuple[str, str], set[str]] = {}
    trees = [tree, *(ast.parse(s) for s in callers)]
    for t in trees:
        for call in (n for n in ast.walk(t) if isinstance(n, ast.Call)):
            fname = _method_name(call)
            if fname not in functions:
                continue
            params = [a.arg for a in functions[fname].args.args if a.arg != "self"]
            for i, arg in enumerate(call.args):
                if i < len(params) and _plural(arg, consts):
                    reaching.setdefault((fname, params[i]), set()).add(_plural(arg, consts))
            for kw in call.keywords:
                if kw.arg in params and _plural(kw.value, consts):
                    reaching.setdefault((fname, kw.arg), set()).add(_plural(kw.value, consts))

    def resolve(fname: str, param: str, depth: int = 0) -> set[str]:
        """Plurals that reach a parameter: constants at call sites, plus whatever reaches an
        outer function's parameter that is passed on to it. Empty when untraceable."""
        found = set(reaching.get((fname, param), set()))
        if depth >= 5:
            return found
        params = [a.arg for a in functions[fname].args.args if a.arg != "self"]
        for outer_name, outer in functions.items():
            outer_params = [a.arg for a in outer.args.args if a.arg != "self"]
            for call in (n for n in ast.walk(outer) if isinstance(n, ast.Call)):
                if _method_name(call) != fname:
                    continue
                for i, arg in enumerate(call.args):
                    if i < len(params) and params[i] == param and isinstance(arg, ast.Name):
                        if arg.id in outer_params and outer_name != fname:
                            found |= resolve(outer_name, arg.id, depth + 1)
        return found

    rules: set[Rule] = set()
    for fname, func in functions.items():
        params = [a.arg for a in func.args.args if a.arg != "self"]
        calls = [n for n in ast.walk(func) if isinstance(n, ast.Call)]
        streams = any(_method_name(c) == "stream" for c in calls)
        for node in ast.walk(func):
            name = node.attr if isinstance(node, ast.Attribute) else None
            match = CLIENT_METHOD.match(name or "")
            # Generated client methods only (not the module's own get_vm and friends).
            if not match or not re.search(r"_namespaced_|_cluster_|_for_all_namespaces$", name):
                continue
            prefix, kind, sub = match.groups()
            verb = METHOD_VERBS[prefix]
            call = next((c for c in calls if c.func is node), None)
            if kind == "custom_object":
                if call is not None:
                    direct, via = _call_plurals(call, consts, params)
                    traced = {p for v in via for p in resolve(fname, v)}
                    plurals = direct or traced or all_plurals
                else:
                    # A bound method handed to watch.stream(): the plural is one of this
                    # function's parameters (or, untraceable, any plural).
                    plurals = {p for param in params for p in resolve(fname, param)} or all_plurals
                # list_namespaced_custom_object(*KUBEVIRT, ...) reaches no CDI plural.
                groups = _named_groups(func, group_tuples)
                if groups:
                    plurals = {p for p in plurals if PLURAL_GROUPS[p] in groups}
            else:
                plurals = {_snake_plural(kind)}
            verbs = {verb}
            if verb == "list" and call is None and streams:
                verbs = {"list", "watch"}
            for plural in plurals:
                group = PLURAL_GROUPS.get(plural, "?")
                resource = plural + ({"_status": "/status", "_scale": "/scale"}.get(sub or "", ""))
                rules |= {(group, resource, v) for v in verbs}
    rules |= _subresource_rules(tree, consts, functions)
    return rules


def _subresource_rules(tree: ast.Module, consts: dict[str, str], functions: dict) -> set[Rule]:
    """Subresources reached through raw paths: a call passing a plural and a subresource name
    (``_subresource(VM_PLURAL, ns, name, "start", ...)``) or a literal ``.../plural/{x}/start``."""
    rules: set[Rule] = set()
    uses_subresources = "subresources.kubevirt.io" in ast.unparse(tree)
    if not uses_subresources:
        return rules
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        plurals = {_plural(a, consts) for a in call.args} - {None}
        words = {
            a.value
            for a in call.args
            if isinstance(a, ast.Constant) and a.value in SUBRESOURCE_VERBS
        }
        for plural in plurals:
            for word in words:
                rules.add((SUBRESOURCE_GROUP, f"{plural}/{word}", SUBRESOURCE_VERBS[word]))
    text = ast.unparse(tree)
    for plural, word in re.findall(
        r"/(virtualmachines|virtualmachineinstances)/\{[^}]+\}/([a-z-]+)", text
    ):
        if word in SUBRESOURCE_VERBS:
            rules.add((SUBRESOURCE_GROUP, f"{plural}/{word}", SUBRESOURCE_VERBS[word]))
    return rules


def role_rules(role: dict) -> set[Rule]:
    granted: set[Rule] = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((group, resource, verb))
    return granted


def derive_from_files(module: Path, callers: list[Path]) -> set[Rule]:
    return derive_rules(module.read_text(), [p.read_text() for p in callers])
