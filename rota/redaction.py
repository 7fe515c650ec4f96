"""Passwords out of every line rota prints (log lines, errors, CLI output): a URL's userinfo
password, a password=... parameter, and the literal passwords of the app's own URLs wherever
a driver echoes them. Re-exported by rota.config.

A password need not be percent-encoded for a person to write it in a URL: libpq and
redis-py read some unencoded characters, and a URL they refuse is still printed in the
error. So a userinfo password is taken to run from the ":" after the user up to the "@"
that starts the host: the last "@" of the first whitespace-separated word that has one
with something after it (a host has no spaces, a password may), never past the end of the
line or the start of another URL. It may hold "/", " ", "@", ":", "#", "?" and "%"."""

from __future__ import annotations

import itertools
import re
from urllib.parse import unquote

_URL_START = r"[A-Za-z][A-Za-z0-9+.-]*://"
# A URL up to the ":" that ends its user (the user may hold an unencoded "@").
_HEAD = re.compile(rf"{_URL_START}[^:/\s'\"]*:")
# What may stand between a URL and the next one on a line: a password ends before it.
_NEXT_URL = re.compile(rf"[\s'\"<>(),;\[\]]+{_URL_START}")
_WORD = re.compile(r"\S+")
# After the ":", a port and the path (or the end): the URL has no password.
_PORT = re.compile(r"\d*(?:[/?#]|$)")


def _spelled(word: str) -> str:
    """A pattern for `word` with any letter also percent-encoded: libpq decodes the key
    `pass%77ord` to `password`."""
    return "".join(f"(?:{c}|%{ord(c.lower()):02x}|%{ord(c.upper()):02x})" for c in word)


_KEYS = "|".join(_spelled(word) for word in ("sslpassword", "password", "passwd", "pwd"))
# key=value of a URL query or a conninfo string (the "=" perhaps encoded as %3D). A value is
# a quoted conninfo value (with \' escapes); in a URL query (after "?" or "&") everything up
# to the next "&", the end of the line or a " (" (libpq's remark after a URL it refuses),
# spaces too (libpq reads them so); elsewhere everything up to a space.
_PARAM = re.compile(
    rf"(?i)(?P<key>(?:(?P<sep>[?&])|(?<![A-Za-z0-9_]))(?:{_KEYS})\s*(?:=|%3d)\s*)"
    r"(?P<pw>'(?:[^'\\]|\\.)*'?|(?(sep)[^&\r\n]+?(?=&|\s+\(|[\r\n]|$)|[^&\s]+))"
)


def _userinfo(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each URL userinfo password in `text`."""
    spans: list[tuple[int, int]] = []
    for head in _HEAD.finditer(text):
        start = head.end()
        if spans and start <= spans[-1][1]:
            continue  # a "://" inside a password already found
        end = len(text)
        for stop in (text.find("\n", start), text.find("\r", start)):
            end = stop if 0 <= stop < end else end
        following = _NEXT_URL.search(text, start, end)
        end = following.start() if following is not None else end
        # An "@" before a host: a word's last "@" with something after it in the word.
        ats = [w.start() + w[0].rindex("@", 0, -1) for w in _WORD.finditer(text, start, end) if "@" in w[0][:-1]]
        if not ats:
            continue
        first = _WORD.match(text, start)
        if first is not None and ats[0] >= first.end() and _PORT.match(first[0]):
            continue  # host:port after the ":" (the "@" is further on the line): no password
        spans.append((start, ats[0]))
    return spans


def redact_url(url: str) -> str:
    """The URL with any password (in the userinfo or a ?password= parameter) replaced by ***."""
    return redact_text(url)


_KNOWN: set[str] = set()


def remember_secrets(*urls: str | None) -> None:
    """Remember the passwords of these URLs (every App does, for its database and locks URLs):
    redact_text() then removes them wherever they appear, e.g. in a driver's message."""
    _KNOWN.update(pw for url in urls if url for pw in _passwords(url))


def forget_secrets() -> None:
    """Forget what remember_secrets() was told (tests; a process never needs it)."""
    _KNOWN.clear()


def redact_text(text: str, *urls: str | None) -> str:
    """`text` without passwords: every URL userinfo password, every password=... pair, and the
    literal passwords of `urls` and of remember_secrets() wherever they appear (drivers echo
    them in odd forms)."""
    secrets = [pw for url in urls if url for pw in _passwords(url)] + list(_KNOWN)
    if "@" in text:  # a userinfo password needs one: most log lines skip the scan
        for start, end in reversed(_userinfo(text)):
            text = f"{text[:start]}***{text[end:]}"
    if "=" in text or "%3" in text:
        text = _PARAM.sub(lambda m: f"{m['key']}***", text)
    for secret in sorted(set(secrets), key=_longest_whole_first):
        if len(secret) >= 3:
            text = _replace(text, secret)
    return text


def _longest_whole_first(secret: str) -> tuple[int, bool]:
    """Whole passwords go before their pieces, longer ones before shorter ones."""
    return -len(secret.removeprefix(_PIECE)), secret.startswith(_PIECE)


def _replace(text: str, secret: str) -> str:
    """A whole password goes wherever it appears; a piece of one (see _pieces) only as a
    word of its own, so that the piece "end" of "x/end" leaves "pending" whole."""
    if secret.startswith(_PIECE):
        piece = secret[len(_PIECE) :]
        if piece not in text:
            return text
        return re.sub(rf"(?<![A-Za-z0-9]){re.escape(piece)}(?![A-Za-z0-9])", "***", text)
    return text.replace(secret, "***")


def _passwords(url: str) -> list[str]:
    """The passwords of `url`, decoded and not, and the pieces a driver may show of one it
    split at an unencoded delimiter (libpq reads "u:a b/c@h" as host "u", port "a b")."""
    found = [url[start:end] for start, end in _userinfo(url)] if "@" in url else []
    found += [m["pw"].strip("'").replace("\\'", "'") for m in _PARAM.finditer(url)]
    whole = {p for q in found if q for p in (q, unquote(q))}
    return sorted(whole | {_PIECE + piece for pw in whole for piece in _pieces(pw)})


def _pieces(password: str) -> set[str]:
    """Each part of `password` between its delimiters, and each part before or after one,
    of 3 characters or more with a letter."""
    cuts = [m.start() for m in _DELIMITER.finditer(password)]
    if not cuts:
        return set()
    bounds = [-1, *cuts, len(password)]
    parts = {password[a + 1 : b] for a, b in itertools.pairwise(bounds)}
    parts |= {password[:c] for c in cuts} | {password[c + 1 :] for c in cuts}
    # Digits alone are not taken: "1234" of "ab/1234" would go from every number logged.
    return {p for p in parts if len(p.strip()) >= 3 and any(c.isalpha() for c in p)}


_DELIMITER = re.compile(r"[/@:#?&=%\s]")
_PIECE = "\x00piece:"  # marks a piece among the secrets (no password holds a NUL)
