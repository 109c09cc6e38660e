"""Reading the files a user hands hostctl (profile TOML, recipe YAML, facts JSON, suites, models
files, state files, a checkpoint's index) without trusting them: a size cap, one encoding (UTF-8,
with or without a BOM), a nesting cap, an integer cap, and for YAML a cap on what aliases expand
to and a refusal of duplicate keys. Every refusal is an InputError naming the file and, where
there is one, the field or the line.

Why each limit exists: a 2 KB YAML alias bomb expands to gigabytes once constructed (so the
expanded size is counted on the composed node graph, where aliases are still shared, before
anything is built); Python's parsers recurse per nesting level, so 5,000-deep input would end in a
RecursionError; PyYAML silently keeps the last of two equal keys, so a typo'd second `context:`
would win without a word; an integer past 64 bits is no setting of any hostctl file, and one past
Python's 4,300-digit conversion limit makes int() and str() raise ValueError wherever it goes
(an 0x literal of 5,000 digits parses, then fails the first time it is printed).
"""

from __future__ import annotations

import codecs
import json
import re
import tomllib
from pathlib import Path
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from hostctl.errors import InputError, MissingFileError

if TYPE_CHECKING:
    import yaml

# A profile or recipe is a few KiB; a facts snapshot of a big host with listed store files a few
# hundred KiB. Anything past these is not one of hostctl's files.
MAX_CONFIG_BYTES = 1024 * 1024
MAX_SNAPSHOT_BYTES = 32 * 1024 * 1024
# hostctl's own formats nest at most 5 levels (facts: paths[].files[][]); 32 leaves room for open maps.
MAX_DEPTH = 32
# Nodes a YAML document may expand to once aliases are followed; a large recipe has ~300.
MAX_YAML_NODES = 20_000
# The largest integer any of hostctl's files holds is a byte count (a TiB is 2**40); int64 is what
# every consumer (JSON readers, Compose, the kernel's sysctls) takes.
MAX_INT_BITS = 63

_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)


def read_text(path: Path, what: str, *, limit: int = MAX_CONFIG_BYTES) -> str:
    """The file's text, or an InputError that says what it is instead (missing, a directory,
    too big, UTF-16, binary, not UTF-8). A UTF-8 BOM is dropped: editors on Windows write one.

    hostctl acts on these files as root, so they are read through safefs.read_trusted: a file
    someone other than root and the invoking user owns or can write, or one in a folder they
    could swap, is refused (UntrustedPathError, exit 3), as sshd's StrictModes refuses keys."""
    from hostctl import safefs

    try:
        data = safefs.read_trusted(path, max_bytes=limit)
    except FileNotFoundError:
        raise MissingFileError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{what} {path} is a directory; expected a file") from None
    except safefs.NotRegularFileError:
        raise InputError(f"{what} {path} is not a regular file (a FIFO or a device?); expected a file") from None
    except safefs.UntrustedPathError as exc:
        exc.details.insert(0, f"hostctl acts on the {what} as root: like sshd's StrictModes, it reads one only when "
                              "root or the user who ran sudo owns it, and no one else can write it or its folders")
        raise
    except safefs.TooLargeError:
        raise InputError(f"{what} {path} is larger than {limit // 1024} KiB: this is not a hostctl {what}",
                         fix=f"check the path; a {what} is a small text file") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise InputError(f"{what} {path} is {name} text (it starts with a {name} byte-order mark); "
                             "hostctl reads UTF-8", fix=f"save {path} as UTF-8 (e.g. `iconv -f {name} -t UTF-8`)")
    data = data.removeprefix(codecs.BOM_UTF8)
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(f"{what} {path} is a binary file (a NUL byte at offset {nul}), not text",
                         fix="check the path: it should name a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(f"{what} {path} is not UTF-8: byte 0x{data[exc.start]:02x} at line {line}, column {col} "
                         "(Latin-1 or another legacy encoding?)", fix=f"save {path} as UTF-8") from None


def _too_deep(where: str, depth: int) -> InputError:
    return InputError(f"{where} nests deeper than {MAX_DEPTH} levels ({depth} or more)",
                      fix="hostctl's files nest a few levels; this one is not one of them (or is damaged)")


def _key_path(path: tuple, key: Any) -> tuple:
    return (*path, key)


def _dotted(path: tuple) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out or "(the document)"


def check_depth(value: Any, where: str) -> None:
    """Walk a parsed document without recursion and refuse one nested deeper than MAX_DEPTH or
    holding an integer past MAX_INT_BITS (named by its field, e.g. runtime.api_port)."""
    stack: list[tuple[Any, int, tuple]] = [(value, 1, ())]
    while stack:
        item, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(where, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1, _key_path(path, k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1, _key_path(path, i)) for i, v in enumerate(item))
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > MAX_INT_BITS:
            raise _too_big(where, _dotted(path), f"an integer of {item.bit_length()} bits")


def _too_big(where: str, field: str, found: str) -> InputError:
    return InputError(f"{where}: {field} is {found}; hostctl's integers fit in 64 bits "
                      f"(at most {2 ** MAX_INT_BITS - 1})", fix=f"correct {field}: it is a count, a size or a port")


# Runs of digits, each matched once (nothing follows to backtrack for): to find the literal int()
# refused (Python's limit is 4,300 digits) and name its line and key.
_DIGITS = re.compile(r"[0-9][0-9_]*")
_HUGE_DIGITS = 4000


def _huge_literal(text: str, where: str) -> InputError:
    found = next((m for m in _DIGITS.finditer(text) if m.end() - m.start() > _HUGE_DIGITS), None)
    at = ""
    if found is not None:
        line_start = text.rfind("\n", 0, found.start()) + 1
        line = text.count("\n", 0, found.start()) + 1
        at = f" line {line} ({text[line_start:found.start()].strip()[:60]} ...)"
    return InputError(f"{where}:{at or ' a value'} holds an integer of thousands of digits; hostctl's integers fit "
                      f"in 64 bits (at most {2 ** MAX_INT_BITS - 1})",
                      fix="correct that value: it is a count, a size or a port")


# Strings (with their escapes) and brackets: enough to measure JSON nesting before json.loads
# recurses into it.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _json_depth(text: str) -> int:
    depth = deepest = 0
    for m in _JSON_TOKENS.finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_json(text: str, where: str) -> Any:
    """JSON text from outside (a file, a checkpoint's index, a hub's answer) with the same limits
    as a file: nesting, NaN/Infinity, integers (an InputError naming `where`)."""
    depth = _json_depth(text)
    if depth > MAX_DEPTH:
        raise _too_deep(where, depth)
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # NaN / Infinity, which JSON does not have; a 5,000-digit integer
        if any(m.end() - m.start() > _HUGE_DIGITS for m in _DIGITS.finditer(text)):
            raise _huge_literal(text, where) from None
        raise InputError(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise _too_deep(where, MAX_DEPTH) from None
    check_depth(data, where)
    return data


def load_json(path: Path, what: str, *, limit: int = MAX_SNAPSHOT_BYTES) -> Any:
    return parse_json(read_text(path, what, limit=limit), f"{what} {path}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (write a finite number, or null)")


def load_toml(path: Path, what: str) -> dict:
    return parse_toml(read_text(path, what), path, what)


def parse_toml(text: str, path: Path, what: str) -> dict:
    """The TOML text read from `path` as data, or an InputError naming the file."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML", details=[str(exc)]) from None
    except ValueError:  # int() past Python's digit limit, raised from inside tomllib
        raise _huge_literal(text, f"{what} {path}") from None
    except RecursionError:
        raise _too_deep(f"{what} {path}", MAX_DEPTH) from None
    check_depth(data, f"{what} {path}")
    return data


# ---------------------------------------------------------------- YAML


@lru_cache(maxsize=1)
def yaml_loader() -> type:
    """SafeLoader (libyaml's when PyYAML has it: 10x faster, the same events and nodes) that refuses
    duplicate keys (PyYAML keeps the last one without a word). Built on first use: JSON and TOML
    readers (state files on `status`'s path) need not import PyYAML (~25 ms)."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, yaml.Node] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        hash(key)
                    except TypeError:
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark, "found an unhashable key",
                            key_node.start_mark) from None
                    if key in seen:
                        first = seen[key].start_mark.line + 1
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r} (first at line {first}): remove one of them",
                            key_node.start_mark)
                    seen[key] = key_node
            return super().construct_mapping(node, deep=deep)

    return Loader


class YamlDoc:
    """What a YAML file holds, and the parser's node graph it was built from (PyYAML's own
    objects: a plain class, not data)."""

    def __init__(self, data: Any, root: yaml.Node | None) -> None:
        self.data = data
        self.root = root  # the composed node graph, for the source text of scalars

    def plain_scalars(self, key: str) -> dict[str, tuple[str, str]]:
        """{name: (YAML tag, source text)} of the non-string scalars in the top-level mapping `key`
        (YAML 1.1 reads `no` as false, `010` as 8, `1.10` as 1.1: the source text says what was meant)."""
        import yaml

        found: dict[str, tuple[str, str]] = {}
        if not isinstance(self.root, yaml.MappingNode):
            return found
        for k, v in self.root.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key and isinstance(v, yaml.MappingNode):
                for name, value in v.value:
                    if isinstance(name, yaml.ScalarNode) and isinstance(value, yaml.ScalarNode) \
                            and value.tag != "tag:yaml.org,2002:str":
                        found[str(name.value)] = (value.tag.rsplit(":", 1)[-1], value.value)
        return found


def _scan_events(text: str, where: str) -> None:
    """Nesting depth from the event stream (PyYAML's parser is iterative; its composer is not)."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=yaml_loader()):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise InputError(f"{where} nests deeper than {MAX_DEPTH} levels (line {line})",
                                 fix="hostctl's files nest a few levels; this one is not one of them (or is damaged)")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _expanded_size(root: yaml.Node, where: str) -> int:
    """Nodes the document expands to with every alias followed, counted on the shared graph
    (memoised, so a bomb costs its own size to measure, not its expansion)."""
    import yaml

    sizes: dict[int, int] = {}
    active: set[int] = set()
    # Iterative post-order walk: (node, children pushed?)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = [] if isinstance(node, yaml.ScalarNode) else (
            [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else list(node.value))
        if not expanded:
            if key in active:
                raise InputError(f"{where}: an alias refers to the node that contains it (a recursive anchor)")
            active.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        active.discard(key)
        total = 1 + sum(sizes.get(id(c), 0) for c in children)
        if total > MAX_YAML_NODES:
            raise InputError(f"{where}: its aliases expand to more than {MAX_YAML_NODES} values (an alias bomb?)",
                             fix="write the values out, or use fewer nested aliases")
        sizes[key] = total
    return sizes.get(id(root), 0)


def load_yaml(path: Path, what: str) -> YamlDoc:
    import yaml

    text = read_text(path, what)
    where = f"{what} {path}"
    try:
        _scan_events(text, where)
        loader = yaml_loader()(text)
        try:
            root = loader.get_single_node()
            if root is None:
                return YamlDoc(None, None)
            _expanded_size(root, where)
            data = loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        # PyYAML names the text it was given ("<unicode string>"), not the file: say which file.
        raise InputError(f"{path} is not valid YAML", details=[str(exc).replace('"<unicode string>"', str(path))],
                         fix="correct the YAML at the line and column named above; nothing was changed") from None
    except ValueError:  # int() past Python's digit limit, raised from inside PyYAML's constructor
        raise _huge_literal(text, where) from None
    except RecursionError:
        raise InputError(f"{where} nests deeper than {MAX_DEPTH} levels") from None
    check_depth(data, where)
    return YamlDoc(data, root)
