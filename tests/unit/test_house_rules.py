"""The house rules the code keeps by construction (docs/house.md): every plan problem code belongs to
exactly one doctor check, every import (function-local too) stays on its floor or below and closes
no circle, every module imports, and nothing decides by matching an error's wording."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
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
    from hostctl.plan.records import StoragePlan

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


# ---------------------------------------------------------------- the import graph (docs/house.md "Floors")


def imports_of(name: str, source: str) -> set[str]:
    """Every hostctl module `name` imports, wherever the import statement stands: at the top, in
    a function (how a command stays fast) or under `if TYPE_CHECKING:` (a dependency all the same)."""
    is_package = MODULE_FILES.get(name, Path()).name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(_known(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.update(_known(f"{base}.{a.name}") if f"{base}.{a.name}" in MODULE_FILES else _known(base)
                         for a in node.names)
    return {m for m in found if m and m != name}


def _known(dotted: str) -> str | None:
    """The hostctl module a dotted name lives in (`hostctl.facts.records.Disk` -> hostctl.facts.records)."""
    while dotted and dotted not in MODULE_FILES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def room(module: str) -> str:
    """A top-level module or subpackage of hostctl (`hostctl.facts.disks` -> hostctl.facts)."""
    return ".".join(module.split(".")[:2])


def house_floors() -> dict[str, int]:
    """Room -> floor, read from the table in docs/house.md: the document is the rule."""
    table = (ROOT.parent / "docs" / "house.md").read_text()
    floors: dict[str, int] = {}
    for line in table.splitlines():
        row = re.match(r"\| (\d) [^|]*\| ([^|]*)\|", line)
        if row:
            for word in row.group(2).replace("`", "").split(","):
                word = word.strip()
                floors["hostctl" if word == "hostctl" else f"hostctl.{word}"] = int(row.group(1))
    return floors


GRAPH = {name: imports_of(name, path.read_text()) for name, path in MODULE_FILES.items()}
FLOORS = house_floors()


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def test_the_graph_reader_sees_every_import_and_the_cycle_finder_a_cycle():
    source = ("from hostctl.facts import disks\n"
              "def f():\n    from hostctl.plan.records import Plan\n"
              "if TYPE_CHECKING:\n    import hostctl.config\n"
              "from . import memory\n")
    assert imports_of("hostctl.facts.gpu", source) == {
        "hostctl.facts.disks", "hostctl.plan.records", "hostctl.config", "hostctl.facts.memory"}
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    assert FLOORS["hostctl.errors"] == 0 and FLOORS["hostctl.facts"] == 2 and FLOORS["hostctl.cli"] == 6


def test_no_module_imports_in_a_circle():
    assert GRAPH["hostctl.doctor.checks"] >= {"hostctl.doctor.checks.gpu", "hostctl.doctor.registry"}
    cycles = import_cycles(GRAPH)
    assert not cycles, "import circles among hostctl modules:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_room_imports_in_a_circle():
    rooms: dict[str, set[str]] = {}
    for name, targets in GRAPH.items():
        rooms.setdefault(room(name), set()).update(room(t) for t in targets if room(t) != room(name))
    cycles = import_cycles(rooms)
    assert not cycles, "import circles among hostctl's rooms:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_every_room_stands_on_a_floor():
    homeless = sorted({room(name) for name in MODULE_FILES} - set(FLOORS) - {"hostctl.__main__"})
    assert not homeless, f"rooms docs/house.md gives no floor: {homeless}"


def test_no_import_climbs_a_floor():
    """A module imports from its own floor or a lower one: facts/ and plan/ never reach code that acts."""
    climbs = [f"{name} (floor {FLOORS[room(name)]}) imports {t} (floor {FLOORS[room(t)]})"
              for name, targets in sorted(GRAPH.items()) for t in sorted(targets)
              if room(name) in FLOORS and room(t) in FLOORS and FLOORS[room(t)] > FLOORS[room(name)]]
    assert not climbs, "\n".join(climbs)


WRITES = {"write_file", "write_text", "write_bytes", "rename", "replace", "unlink", "remove", "mkdir", "makedirs",
          "rmdir", "rmtree", "chmod", "chown", "symlink", "link", "truncate", "copy", "copy2", "copyfile", "move"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}


def writes_in(source: str) -> list[str]:
    """Each call in source that changes a file (by the called name: os.rename, Path.write_text,
    safefs.write_file, shutil.copy...), each open flag that asks for writing, and each open() with
    a writing mode."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in WRITES and not (name == "replace" and isinstance(f, ast.Attribute)
                                       and not (isinstance(f.value, ast.Name) and f.value.id == "os")):
                found.append((node.lineno, node.col_offset, f"{name}()"))
            mode = node.args[1] if name == "open" and len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "mode"), None) if name == "open" else None
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                found.append((node.lineno, node.col_offset, f"open(..., {mode.value!r})"))
        elif isinstance(node, ast.Attribute) and node.attr in WRITE_FLAGS:
            found.append((node.lineno, node.col_offset, node.attr))
    return [f"line {line}: {what}" for line, _, what in sorted(found)]


def test_the_write_finder_sees_each_kind_of_write():
    source = ("import os, shutil\nos.rename(a, b)\np.write_text('x')\nsafefs.write_file(p, 'x')\n"
              "shutil.rmtree(d)\nfd = os.open(p, os.O_WRONLY | os.O_CREAT)\nopen(p, 'a')\n"
              "text.replace('a', 'b')\nopen(p)\nos.stat(p)\n")
    assert [w.split(": ")[1] for w in writes_in(source)] == [
        "rename()", "write_text()", "write_file()", "rmtree()", "O_WRONLY", "O_CREAT", "open(..., 'a')"]


@pytest.mark.parametrize("floor_room", ["hostctl.facts", "hostctl.plan"])
def test_reading_and_deciding_write_nothing(floor_room):
    """facts/ reads and plan/ decides: neither changes a file (a change goes through hostctl.act)."""
    hits = [f"{MODULE_FILES[name].relative_to(ROOT.parent)} {w}" for name in sorted(MODULE_FILES)
            if room(name) == floor_room for w in writes_in(MODULE_FILES[name].read_text())]
    assert not hits, "\n".join(hits)


# ---------------------------------------------------------------- one data layer (docs/house.md)


# Replaced by the libraries' own means (issue 28): pydantic for records and their strictness and
# start-up (defer_build), typer and rich for the console, the docker SDK for the engine, the
# executor's test hook for the kill points, secrets.py for redaction; and the compose version memo,
# the one file a reader wrote (facts/ reads and never writes).
REPLACED = ("hostctl.record", "hostctl.strict_record", "hostctl.config_cache", "hostctl.noplugins",
            "hostctl.http10", "hostctl.testhooks", "hostctl.doctor.redact", "hostctl.facts.compose_cache")


@pytest.mark.parametrize("gone", REPLACED)
def test_a_replaced_module_is_gone_and_named_nowhere(gone):
    assert gone not in MODULE_FILES
    pattern = re.compile(r"\b" + re.escape(gone) + r"\b|from " + re.escape(gone.rpartition(".")[0])
                         + r" import (\w+, )*" + re.escape(gone.rpartition(".")[2]) + r"\b")
    naming = [str(p.relative_to(ROOT.parent)) for p in MODULE_FILES.values() if pattern.search(p.read_text())]
    assert not naming, f"{gone} is still named in {naming}"


def test_every_data_type_derives_from_data():
    """One way to define a data type: a record, a pydantic class deriving from hostctl.data.Data."""
    strays = []
    for name, path in MODULE_FILES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "dataclasses":
                strays.append(f"{name}: imports dataclasses")
            elif isinstance(node, ast.ClassDef) and name != "hostctl.data":
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if "BaseModel" in bases:
                    strays.append(f"{name}.{node.name}: derives from BaseModel, not Data")
    assert not strays, "\n".join(strays)


def test_every_data_type_builds_its_validator():
    """defer_build puts off building a validator to its first use: a field of a type pydantic
    cannot check (a plain class not declared arbitrary) would otherwise fail only in the one
    command that first makes such a value."""
    from hostctl.data import Data

    for name in IMPORTABLE:
        importlib.import_module(name)
    types, seen = [Data], set()
    while types:
        for sub in types.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                types.append(sub)
    assert len(seen) > 150  # every module was imported: facts, plans, profiles, results
    broken = []
    for cls in sorted(seen, key=lambda c: (c.__module__, c.__qualname__)):
        try:
            cls.model_rebuild(force=True, raise_errors=True)
        except Exception as exc:  # noqa: BLE001  (each broken type is listed, not just the first)
            broken.append(f"{cls.__module__}.{cls.__qualname__}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    assert not broken, "\n".join(broken)


PLUGIN_SEARCH = """
import importlib.metadata, os, sys
from pathlib import Path
searched = []
real = importlib.metadata.distributions
importlib.metadata.distributions = lambda *a, **k: searched.append(1) or real(*a, **k)
from hostctl.config import load_config
load_config(Path(sys.argv[1]))
print(os.environ.get("PYDANTIC_DISABLE_PLUGINS"), len(searched))
"""


@pytest.mark.parametrize("given, expected", [(None, "__all__ 0"), ("", " 1")])
def test_validating_a_profile_does_not_search_every_installed_package(given, expected):
    """pydantic's plugin search reads every distribution's entry points (~60 ms on the H200
    machine): hostctl turns it off with pydantic's switch, and a user's own value wins."""
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if given is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = given
    env["PYTHONPATH"] = str(ROOT.parent)
    done = subprocess.run([sys.executable, "-c", PLUGIN_SEARCH, str(ROOT.parent / "runtime/hosts/demo-cpu.toml")],
                          capture_output=True, text=True, env=env, cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip("\n") == expected


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


# ---------------------------------------------------------------- names (docs/house.md "Names")


def _defined_names() -> dict[str, list[str]]:
    """Every class, and every module-level CapWords alias (Role = Literal[...]), with where it is defined."""
    where: dict[str, list[str]] = {}
    for name, path in MODULE_FILES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{name}:{node.lineno}")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper():
                        where.setdefault(t.id, []).append(f"{name}:{node.lineno} (alias)")
    return where


def test_no_class_name_is_defined_twice():
    """One name, one idea: two classes of one name in hostctl/ are two ideas under one word."""
    classes = {n: [w for w in ws if not w.endswith("(alias)")] for n, ws in _defined_names().items()}
    twice = {n: ws for n, ws in classes.items() if len(ws) > 1}
    assert not twice, "\n".join(f"{n}: {', '.join(ws)}" for n, ws in sorted(twice.items()))


@pytest.mark.parametrize("word", ["Decision", "Role", "Record", "Model"])
def test_the_words_of_the_house_name_one_thing(word):
    """Decision is a planner's choice (plan), Role a storage role; no data type is a Record or a Model."""
    where = _defined_names().get(word, [])
    assert len(where) <= 1, f"{word} is defined in {where}"
    if word in ("Record", "Model"):
        assert not where, f"{word} is defined in {where}: data types derive from Data"
