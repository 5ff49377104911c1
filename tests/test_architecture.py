"""The architecture the design promises (docs/design.md, "Dependencies: one direction"),
checked on the source itself: a test walks every import of every module of ours.

- ``ledger`` and ``contracts`` import nothing of ours; ``trainer``, ``inference_node``,
  ``governance`` and ``committee`` import them, and each other only along an edge that
  docs/design.md lists; ``devnet`` imports anything, and nothing outside ``devnet`` imports it.
- Only the root command (``devnet/cli.py``) imports a CLI module.
- No import cycle between modules (imports inside functions count; ``TYPE_CHECKING`` ones do
  not, since they never run).
- Every error a package raises on purpose derives from a base the root command prints as one
  line.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("ledger", "contracts", "trainer", "inference_node", "governance", "committee",
            "content_endpoint", "devnet")
SKIP_DIRS = {"out", "cache", "lib", "node_modules", "__pycache__", "test", "src", "script"}

# The package edges docs/design.md allows (besides a package importing itself).
ALLOWED = {
    "ledger": set(),
    "contracts": set(),
    "trainer": {"ledger"},
    "inference_node": {"ledger", "contracts", "trainer"},
    "governance": {"ledger", "contracts", "inference_node", "committee"},
    "committee": {"ledger", "contracts", "inference_node", "trainer"},
    "content_endpoint": {"ledger"},
    "devnet": set(PACKAGES),
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if SKIP_DIRS & set(path.relative_to(REPO).parts[:-1]):
                continue
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(module: str, path: Path) -> set[str]:
    """The modules of ours that ``module`` imports (at any depth of its code)."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_lines(tree)
    targets: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (the project uses absolute ones)"
            base = node.module or ""
            # `from ledger import rfc9162` imports the submodule, not the package's __init__
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _package(module: str) -> str:
    return module.partition(".")[0]


def test_the_walk_sees_the_whole_tree():
    # a guard against a walk that silently finds nothing: known modules and known edges
    assert {"ledger.rfc9162", "ledger.runtime", "devnet.cli", "inference_node.launch",
            "governance.runtime", "trainer.publish"} <= set(MODULES)
    assert "ledger.errors" in GRAPH["ledger.entries"]
    assert "ledger.rfc9162" in GRAPH["ledger.entries"]  # `from ledger import rfc9162`
    assert "ledger.chain" not in GRAPH["ledger.proofs"]  # TYPE_CHECKING only


def test_packages_depend_in_one_direction():
    wrong = sorted(f"{module} imports {target}" for module, targets in GRAPH.items()
                   for target in targets
                   if _package(target) != _package(module)
                   and _package(target) not in ALLOWED[_package(module)])
    assert wrong == []


def test_every_allowed_edge_is_documented_with_its_reason():
    design = (REPO / "docs" / "design.md").read_text()
    used = {(_package(m), _package(t)) for m, targets in GRAPH.items() for t in targets
            if _package(m) != _package(t) and _package(m) != "devnet"}
    for source, target in sorted(used):
        assert re.search(rf"`{source} → ({target}|\*)`", design), \
            f"docs/design.md does not list the edge {source} → {target}"


def test_nothing_but_the_root_imports_devnet_or_a_cli_module():
    wrong = sorted(f"{module} imports {target}" for module, targets in GRAPH.items()
                   for target in targets
                   if (_package(target) == "devnet" and _package(module) != "devnet")
                   or (target.rpartition(".")[2] == "cli" and module != "devnet.cli"))
    assert wrong == []


def test_no_import_cycles():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(GRAPH.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert cycles == []


# Exceptions that never leave their module: caught there and turned into an answer (HTTP,
# JSON-RPC) or into the package's own error (a pydantic validator's rule -> EntryError).
INTERNAL_ERRORS = {
    "committee.aggregator.PoolError",  # answered as an HTTP status by the aggregator
    "committee.service.DeliveryRefused",  # logged by the verifier loop
    "committee.service.DeliveryDeferred",  # likewise: the verdict is sent again later
    "committee.verdict_auth.AuthError",  # answered 401 by the aggregator
    "committee.judge_worker.BoundExceeded",  # a rejection (committee.service.worker_judges)
    "committee.judge_worker.WorkerFailed",  # an abstention, or an audit finding
    "inference_node.bundle_access.AccessError",  # answered 401/403 by the node
    "content_endpoint.kubo_rpc.ClientGone",  # the client left: nothing is answered
    "content_endpoint.kubo_rpc.RpcError",
    "content_endpoint.gateway.GatewayError",
    "governance.dashboard.rpc_proxy.RpcRefusal",
    "ledger.entries._Rule",
}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_error_derives_from_a_base_the_root_prints(package):
    from devnet.cli import EXPECTED_ERRORS

    stray = []
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if ".migrations" in info.name:
            continue  # Alembic scripts: define no errors, run only under Alembic
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == info.name and issubclass(cls, Exception)
                    and f"{info.name}.{name}" not in INTERNAL_ERRORS
                    and not issubclass(cls, EXPECTED_ERRORS)):
                stray.append(f"{info.name}.{name}")
    assert stray == []
