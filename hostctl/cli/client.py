"""`hostctl client`: what a client needs to reach this runtime, as one client's file (opencode, the
OpenAI SDK's environment) or as JSON. Parsing and writing only; the documents are
hostctl.service.clientconfig's."""

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from hostctl.cli.options import ConfigOpt, global_options, say, typed_path
from hostctl.errors import FailedError, InputError, UntrustedPathError

app = typer.Typer()


# A choice typer checks before the command runs; it mirrors hostctl.service.clientconfig.FORMATS,
# which parsing does not import (tests/unit/test_client_config.py keeps them equal).
class ClientFormat(str, Enum):
    opencode = "opencode"
    openai_env = "openai-env"
    json = "json"


@app.command()
def client(
    ctx: typer.Context,
    fmt: Annotated[ClientFormat, typer.Argument(metavar="opencode|openai-env|json", show_default=False,
                                                help="opencode: an opencode.json; openai-env: sh lines for the "
                                                     "OpenAI SDK (`. FILE`); json: hostctl.client/v1.")],
    out: Annotated[Optional[str], typer.Option("--out", metavar="PATH", help="Write the file here (replaced "
                                               "atomically; mode 0644, 0600 with --with-key; a symlink is refused). "
                                               "Default, or '-': print it.")] = None,
    with_key: Annotated[bool, typer.Option("--with-key", help="Write the API key itself, read from the variable "
                                           "runtime.api_key_env names, instead of a reference to that variable. "
                                           "Needs --out PATH: the file is made 0600, and a key is never "
                                           "printed.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Write what a client needs to reach this runtime: the base URL, the served name, the context,
    the max output, whether tool calling is on, and the API key by reference (the name of the
    variable the profile's runtime.api_key_env gives), from the profile and recipe alone. The base
    URL is the API as this host reaches it (127.0.0.1 for one listening on every address): a client
    on another machine uses this host's address instead.

    Max output: the recipe's cap (max_new_tokens in --override-generation-config) when it sets
    one below the context, else a quarter of the context, at most 32768. Tool calling is on when
    the recipe's serve_args turn on --enable-auto-tool-choice.

    Examples: hostctl client opencode --out opencode.json (in a project: opencode reads it there);
    hostctl client openai-env --out client.env && . ./client.env && python3 my_client.py
    """
    from hostctl.service import clientconfig

    if with_key and out in (None, "-"):
        raise InputError("--with-key writes the API key into a file, never to the terminal",
                         fix="add --out PATH (made mode 0600), or drop --with-key to write a reference to the key")
    cfg = global_options(ctx, config, None).config()
    settings = clientconfig.settings(cfg)
    key = _key(settings.api_key_env) if with_key else None
    text = clientconfig.render(fmt.value, settings, key)
    if out in (None, "-"):
        _print(text)
        return
    path = typed_path(out)
    _write(path, text, secret=key is not None)
    say(f"wrote {out} ({fmt.value}, mode {'0600: it holds the API key' if key is not None else '0644'})")


def _print(text: str) -> None:
    """The document on stdout with every known secret value hidden, but not the shapes that stdout's
    redaction also hides: here they are references, which a client needs as written
    (`OPENAI_API_KEY="${NAME:?...}"`, `"apiKey": "{env:NAME}"`, the `none` placeholder). The key
    itself is never in it: --with-key needs --out."""
    from hostctl import secrets

    stream = getattr(sys.stdout, "target", sys.stdout)  # under main(): the stream behind secrets.RedactingStream
    stream.write(secrets.redact_values(text))
    stream.flush()


def _key(api_key_env: str | None) -> str:
    if not api_key_env:
        raise InputError("--with-key: the runtime checks no API key (the profile names no runtime.api_key_env)",
                         fix="drop --with-key, or set runtime.api_key_env in the profile and run `hostctl up` again")
    key = os.environ.get(api_key_env, "")
    if not key:
        raise InputError(f"--with-key: {api_key_env} (the profile's runtime.api_key_env) is not set here",
                         fix=f"run it where {api_key_env} holds the runtime's API key (under sudo: sudo --preserve-env="
                             f"{api_key_env}), or drop --with-key to write a reference to the variable")
    return key


def _write(path: Path, text: str, *, secret: bool) -> None:
    """Replace the file at `path` the one way hostctl writes a file a user names (hostctl.safefs:
    every folder on the way trusted, a temporary renamed over it); under sudo it is the user's.
    A symlink there is refused: writing through it as root could reach any file, and replacing it
    would quietly cut a link the user made (a dotfiles repository's)."""
    import stat

    from hostctl import safefs

    try:
        with safefs.opened_dir(path.parent, create=True, owner=safefs.sudo_owner()) as dfd:
            try:
                st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise UntrustedPathError(path, f"it is a symlink ({safefs.describe(st)}); hostctl neither writes "
                                           "through one nor replaces it", fix=f"give its target as --out: "
                                                                              f"--out \"$(realpath {path})\"")
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise InputError(f"--out {path} is not a regular file", fix="name a file to write")
        safefs.write_file(path, text, mode=0o600 if secret else 0o644, owner=safefs.sudo_owner())
    except OSError as exc:
        raise FailedError(f"cannot write {path}: {exc.strerror or exc}; nothing was written",
                          fix="choose a writable place with --out, or print it with --out -") from None
