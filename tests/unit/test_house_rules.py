"""The house rules the code keeps by construction: every plan problem code belongs to exactly one
doctor check, the import graph among hostctl's modules has no cycle (top-level imports, read
statically), every module imports, and nothing decides by matching an error's wording."""

from __future__ import annotations

import ast
import importlib
import re
from collections import Counter
from pathlib import Path

import pytest

import hostctl
from hostctl.doctor.checks import MODULES, all_checks
from hostctl.plan import codes

ROOT = Path(hostctl.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ["hostctl", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULE_FILES = _modules()
IMPORTABLE = sorted(n for n in MODULE_FILES if n != "hostctl.__main__")  # __main__ runs the CLI


# ---------------------------------------------------------------- problem codes


def test_every_plan_code_belongs_to_exactly_one_check():
    owners = Counter(code for c in all_checks() for code in c.codes)
    unclaimed = sorted(codes.CODES - set(owners))
    claimed_twice = sorted(code for code, n in owners.items() if n > 1)
    unknown = sorted(set(owners) - codes.CODES)
    assert not unclaimed, f"codes no doctor check reports: {unclaimed}"
    assert not claimed_twice, f"codes two checks claim: {claimed_twice}"
    assert not unknown, f"checks claim codes the plan cannot produce: {unknown}"


def test_a_planner_cannot_raise_an_undeclared_code():
    from hostctl.plan.model import StoragePlan

    plan = StoragePlan()
    with pytest.raises(ValueError, match="unknown plan problem code"):
        plan.problem("storage.made_up", "error", "x")
    plan.problem(codes.RANK_NOT_SPLIT, "warn", "x")
    assert [p.code for p in plan.problems] == [codes.RANK_NOT_SPLIT]


def test_every_code_a_planner_names_is_declared():
    """Statically: each codes.NAME a planner passes exists (a typo would otherwise surface only
    on the host where that problem occurs)."""
    declared = {k for k in vars(codes) if k.isupper()}
    for name, path in MODULE_FILES.items():
        if not name.startswith("hostctl.plan") and not name.startswith("hostctl.doctor"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "codes" \
                    and node.attr.isupper():
                assert node.attr in declared, f"{path}: codes.{node.attr} is not declared"


def test_each_check_area_is_its_module():
    by_area = {m.__name__.rsplit(".", 1)[-1]: m for m in MODULES}
    for c in all_checks():
        assert c in [x for x in by_area[c.area].CHECKS] or c.id in {x.id for x in by_area[c.area].CHECKS}


# ---------------------------------------------------------------- no decisions by wording


# What deciding by wording looked like here: a message or fix tested with `in`, startswith or
# equality against a literal. The patterns name the attributes that carry wording.
WORDING = re.compile(r"""(["'][^"'\n]+["']\s+(not\s+)?in\s+\w+(\.\w+)*\.(message|fix|summary)\b"""
                     r"""|\.(message|fix)\.(startswith|endswith)\("""
                     r"""|in\s+str\((e|exc|err)\)"""
                     r"""|["']no host profile found["']\s+in\b)""")


def test_nothing_decides_by_an_errors_or_a_fixs_wording():
    hits = []
    for name, path in MODULE_FILES.items():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if WORDING.search(line) and not line.lstrip().startswith("#"):
                hits.append(f"{path.relative_to(ROOT.parent)}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_the_wording_pattern_catches_what_it_is_for():
    for line in ('if "no host profile found" in exc.message:', 'if "does not exist" in exc.message:',
                 '[p for p in ps if p.fix and "set storage" in p.fix]', 'p.message.startswith(label)',
                 'if "timed out" in str(e):'):
        assert WORDING.search(line), line
    assert not WORDING.search('if p.code in codes:')


# ---------------------------------------------------------------- the import graph


def _top_level_imports(name: str, path: Path) -> set[str]:
    """The hostctl modules `name` imports when it is imported: module-level statements only
    (not inside functions, not under `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(stmts):
        for node in stmts:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.add(sub if sub in MODULE_FILES else base)
            elif isinstance(node, ast.If):
                test = node.test
                if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
                        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
                    visit(node.orelse)
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, (ast.With,)):
                visit(node.body)

    visit(tree.body)
    return {m for m in found if m in MODULE_FILES and m != name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    import sys
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_hostctl_import_graph_has_no_cycle():
    graph = {name: _top_level_imports(name, path) for name, path in MODULE_FILES.items()}
    assert graph["hostctl.doctor.checks"] >= {"hostctl.doctor.checks.gpu", "hostctl.doctor.registry"}
    cycles = import_cycles(graph)
    assert not cycles, "import cycles among hostctl modules:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("name", IMPORTABLE)
def test_every_module_imports(name):
    importlib.import_module(name)


def test_no_profile_is_a_type_with_the_bad_input_exit_code(monkeypatch, tmp_path):
    from hostctl import config, paths
    from hostctl.errors import EXIT_BAD_INPUT, InputError, MissingFileError, NoProfileError

    monkeypatch.setattr(paths, "PROFILE_SEARCH", (tmp_path / "hostctl.toml",))
    with pytest.raises(NoProfileError) as caught:
        config.find_profile(None)
    assert caught.value.exit_code == EXIT_BAD_INPUT and isinstance(caught.value, InputError)
    # an explicit --config that is missing is bad input too, but not "no profile": doctor must not skip past it
    with pytest.raises(InputError) as explicit:
        config.find_profile(tmp_path / "missing.toml")
    assert not isinstance(explicit.value, NoProfileError)
    from hostctl.facts import load_snapshot

    with pytest.raises(MissingFileError) as snap:
        load_snapshot(tmp_path / "snap.json")
    assert "hostctl facts --json" in (snap.value.fix or "")
