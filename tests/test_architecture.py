"""The data flow is one-way: a module imports only from modules to its left (DESIGN.md)."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "infersim"

ORDER = ["units", "errors", "files", "table_cache", "specs", "graph", "roofline", "torus", "comm", "plan", "parallel", "engine",
         "optimizations", "checks", "query", "serving", "scheduler", "disagg_eval", "disagg_load", "tco", "grid", "infeasible", "search", "report",
         "api", "runners_up", "pareto", "ablation", "des", "run_settings", "accuracy", "workloads", "at_load", "capacity", "curve", "sweep",
         "cli_products", "cli_profiles", "cli", "__main__", "__init__"]
RANK = {name: i for i, name in enumerate(ORDER)}


def _top(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    return rel.parts[0]


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    depth = len(path.relative_to(PKG).parts) - 1  # 1 inside a subpackage
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level > depth:  # reaches the package root: first name is the module
                target = (node.module or "").split(".")[0] or (node.names[0].name if node.names else "")
                if not node.module:
                    for alias in node.names:
                        yield alias.name, node.lineno
                    continue
                yield target, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("infersim."):
                    yield alias.name.split(".")[1], node.lineno


def test_every_module_is_ranked():
    tops = {_top(p) for p in PKG.rglob("*.py")}
    assert tops <= set(RANK), f"add to ORDER: {sorted(tops - set(RANK))}"


def test_imports_flow_left_to_right():
    bad = []
    for path in PKG.rglob("*.py"):
        me = _top(path)
        for target, line in _imports(path):
            if target in RANK and RANK[target] > RANK[me]:
                bad.append(f"{path.relative_to(PKG)}:{line} imports {target}")
    assert not bad, "imports against the data flow:\n" + "\n".join(bad)
