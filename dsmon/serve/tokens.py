"""Bearer tokens for the ingest API: where they come from and how they are compared.

Collectors on other nodes push records to the dashboard over plain HTTP, so the one thing
standing between the network and the store is a shared secret. It is read from a file
(``--token-file``, the form that keeps it out of ``ps`` output and shell history) or from the
``DSMON_TOKEN`` environment variable, and ``dsmon dashboard`` generates and prints one when
neither is given so a first run needs no setup. Comparison is constant-time so a client
cannot learn the token byte by byte from response times.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

TOKEN_ENV = "DSMON_TOKEN"  # the ingest token, when no token file is given
TOKEN_FILE_ENV = "DSMON_TOKEN_FILE"  # a file holding it, read when TOKEN_ENV is unset

_MIN_LENGTH = 16  # shorter secrets are guessable; refuse them rather than serve with one


class TokenError(ValueError):
    """No usable token: the message says which source was tried and why it failed."""


def generate_token() -> str:
    """A fresh random token (256 bits, URL-safe) for a dashboard started without one."""
    return secrets.token_urlsafe(32)


def read_token_file(path: str | Path) -> str:
    """The token stored in ``path``: its first line, surrounding whitespace removed.

    Raises:
        TokenError: the file cannot be read, is empty or holds a too-short token.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"token file {path}: {exc}") from None
    lines = text.strip().splitlines()
    return check_token(lines[0].strip() if lines else "", f"token file {path}")


def check_token(token: str, origin: str) -> str:
    """Return ``token`` if it is long enough to be a secret, else raise naming ``origin``."""
    if len(token) < _MIN_LENGTH:
        raise TokenError(f"{origin}: token is {len(token)} characters, need at least {_MIN_LENGTH}")
    return token


def load_token(
    token_file: str | Path | None = None, env: Mapping[str, str] | None = None
) -> str | None:
    """The configured token: ``token_file``, else ``$DSMON_TOKEN``, else ``$DSMON_TOKEN_FILE``.

    Returns ``None`` when nothing is configured, so the caller decides whether to generate
    one (the dashboard) or to fail (a headless ingest server must not run open).
    """
    env = os.environ if env is None else env
    if token_file is not None:
        return read_token_file(token_file)
    if env.get(TOKEN_ENV):
        return check_token(env[TOKEN_ENV].strip(), f"${TOKEN_ENV}")
    if env.get(TOKEN_FILE_ENV):
        return read_token_file(env[TOKEN_FILE_ENV])
    return None


def write_token_file(path: str | Path, token: str) -> Path:
    """Write ``token`` to ``path`` readable by its owner only, so collectors can use it.

    The file is created with mode 0600 before the secret is written, and replaced atomically,
    so no other user can read it even briefly.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    os.replace(tmp, path)
    return path


def keep_or_create_token_file(path: str | Path) -> tuple[str, bool]:
    """The token in ``path``, or a new one written there; and whether it is new.

    A server restarted with the same file keeps its token: collectors already running
    with it stay let in. Only a missing or empty file gets a new token; a file holding an
    unusable one is an error, never overwritten, since it may be a secret kept elsewhere too.

    Raises:
        TokenError: the file cannot be read or holds a too-short token.
    """
    path = Path(path)
    try:
        present = bool(path.read_bytes().strip())
    except FileNotFoundError:
        present = False
    except OSError as exc:
        raise TokenError(f"token file {path}: {exc}") from None
    if present:
        return read_token_file(path), False
    token = generate_token()
    write_token_file(path, token)
    return token, True


def resolve_token(
    token_file: str | Path | None = None, env: Mapping[str, str] | None = None
) -> tuple[str, bool]:
    """The token to serve with and whether it was just generated (then the caller prints it)."""
    token = load_token(token_file, env)
    if token is not None:
        return token, False
    return generate_token(), True


def token_banner(token: str, url: str, token_file: str | Path | None = None) -> str:
    """What ``dsmon dashboard`` prints for a generated token: the token and how to use it.

    The token is shown once, on the console of whoever started the dashboard, because a
    generated secret nobody can read back would lock every collector out.
    """
    use = f"--token-file {token_file}" if token_file else "--token-file FILE (the token in FILE)"
    return (
        f"dsmon: ingest token (generated, keep it secret): {token}\n"
        f"dsmon: on each node run: dsmon collect --server {url} {use} --log 'LOG_GLOB'"
    )


def token_matches(presented: str | None, token: str) -> bool:
    """Constant-time check of an ``Authorization`` header value against ``token``.

    Only ``Bearer <token>`` is accepted; comparing bytes with :func:`hmac.compare_digest`
    takes the same time wherever the first difference is.
    """
    if not presented:
        return False
    scheme, _, value = presented.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode("utf-8"), token.encode("utf-8"))
