from __future__ import annotations

import stat
from pathlib import Path

import pytest

from dsmon.serve.tokens import (
    TokenError,
    generate_token,
    load_token,
    read_token_file,
    resolve_token,
    token_banner,
    token_matches,
    write_token_file,
)

TOKEN = "0123456789abcdef-token"


def test_token_file_first_line_wins_over_the_environment(tmp_path: Path) -> None:
    f = tmp_path / "tok"
    f.write_text(f"  {TOKEN}  \nsecond line\n")
    assert load_token(f, env={"DSMON_TOKEN": "from-env-0123456789"}) == TOKEN


def test_environment_then_environment_file(tmp_path: Path) -> None:
    f = tmp_path / "tok"
    f.write_text(TOKEN)
    assert (
        load_token(env={"DSMON_TOKEN": "from-env-0123456789", "DSMON_TOKEN_FILE": str(f)})
        == "from-env-0123456789"
    )
    assert load_token(env={"DSMON_TOKEN_FILE": str(f)}) == TOKEN
    assert load_token(env={}) is None


def test_bad_tokens_name_their_source(tmp_path: Path) -> None:
    with pytest.raises(
        TokenError, match=r"^\$DSMON_TOKEN: token is 5 characters, need at least 16$"
    ):
        load_token(env={"DSMON_TOKEN": "short"})
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    with pytest.raises(TokenError, match=f"^token file {empty}: token is 0 characters"):
        read_token_file(empty)
    with pytest.raises(TokenError, match=f"^token file {tmp_path / 'missing'}: "):
        read_token_file(tmp_path / "missing")


def test_written_token_file_is_private_and_reads_back(tmp_path: Path) -> None:
    path = write_token_file(tmp_path / "sub" / "token", TOKEN)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == TOKEN + "\n"
    assert read_token_file(path) == TOKEN
    assert [p.name for p in path.parent.iterdir()] == ["token"]


def test_resolve_generates_only_when_nothing_is_configured(tmp_path: Path) -> None:
    token, generated = resolve_token(env={})
    assert generated and len(token) == 43 and token != generate_token()
    assert resolve_token(env={"DSMON_TOKEN": TOKEN}) == (TOKEN, False)


def test_token_matches_only_the_exact_bearer_token() -> None:
    assert token_matches(f"Bearer {TOKEN}", TOKEN)
    assert token_matches(f"bearer  {TOKEN} ", TOKEN)
    assert not token_matches(f"Bearer {TOKEN}x", TOKEN)
    assert not token_matches(f"Basic {TOKEN}", TOKEN)
    assert not token_matches(TOKEN, TOKEN)
    assert not token_matches("", TOKEN)
    assert not token_matches(None, TOKEN)


def test_banner_shows_token_and_collect_command() -> None:
    text = token_banner(TOKEN, "http://head:8502", "/etc/dsmon/token")
    assert text == (
        f"dsmon: ingest token (generated, keep it secret): {TOKEN}\n"
        "dsmon: on each node run: dsmon collect --server http://head:8502 "
        "--token-file /etc/dsmon/token --log 'LOG_GLOB'"
    )
