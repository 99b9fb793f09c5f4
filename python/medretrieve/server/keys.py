"""API keys of the service: their format, parsing and the constant-time lookup (:class:`KeyRing`). The rules
for requests (which path needs which scope, the 401 / 403 answers) are :mod:`.auth`'s.

Keys come from a key file (``medretrieve serve --api-key-file``) or the environment variable :data:`KEYS_ENV`,
in one format: one key a line, then its scopes, comma-separated (blank lines and ``#`` comments are skipped)::

    # key                                      scopes
    3f9a0c7e5b1d4c2a8e6f0b9d7c5a3e1f           search
    sha256:5e884898da28047151d0e56f8dc629...    search,answer,admin

A key is 16 to 512 characters of ``A-Z a-z 0-9 - . _ ~ + /`` (RFC 6750's token characters, so it fits a header
as it is); ``sha256:<64 hex digits>`` gives the key by its SHA-256 digest (:func:`hash_key`) instead, so the
file need not hold the key itself. In the environment, entries may also be separated by ``;``.

The server keeps only the keys' SHA-256 digests (the plain keys never reach its workers' environment) and
compares the digest of a presented key with every stored one by ``hmac.compare_digest`` over the fixed 32 bytes,
without stopping at a match: the time taken does not depend on how much of a key is right. No web framework is
imported here: a ServerConfig checks its keys with this module alone.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple, Union

SCOPES = ("search", "answer", "admin")
KEYS_ENV = "MEDRETRIEVE_API_KEYS"  # the server's keys, in the key file's format
MIN_KEY_CHARS, MAX_KEY_CHARS = 16, 512
KEY_PATTERN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750 b64token
_DIGEST = re.compile(r"sha256:([0-9a-fA-F]{64})")

#: ``(sha256 hex digest, scopes)`` of each key: what a ServerConfig holds and sends to its workers
KeyDigests = Tuple[Tuple[str, Tuple[str, ...]], ...]


def check_key(key: str) -> str:
    """``key`` when it is a usable API key (see the module docstring), else ValueError saying what is wrong
    (without echoing the key)."""
    if not isinstance(key, str):
        raise TypeError(f"an API key is a str, not {type(key).__name__}")
    if not MIN_KEY_CHARS <= len(key) <= MAX_KEY_CHARS:
        raise ValueError(f"an API key must be {MIN_KEY_CHARS} to {MAX_KEY_CHARS} characters long (got "
                         f"{len(key)}); make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    if not KEY_PATTERN.fullmatch(key):
        raise ValueError("an API key may hold only A-Z a-z 0-9 - . _ ~ + / (and = at its end), so that it is sent "
                         "in a header as it is")
    return key


def hash_key(key: str) -> str:
    """The SHA-256 digest of ``key`` as 64 hex digits (write ``sha256:<digest>`` in a key file to keep the key
    itself out of it)."""
    return hashlib.sha256(check_key(key).encode("ascii")).hexdigest()


def _scopes(text: str, where: str) -> Tuple[str, ...]:
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [s for s in names if s not in SCOPES]
    if not names or unknown:
        raise ValueError(f"{where}: scopes must be a comma-separated list of {', '.join(SCOPES)}"
                         + (f"; unknown: {', '.join(unknown)}" if unknown else "; none given"))
    return names


def parse_keys(text: str, where: str = KEYS_ENV) -> KeyDigests:
    """The keys of a key file's text (module docstring) as ``(digest, scopes)`` pairs; ValueError naming
    ``where`` and the line at fault. Entries may be separated by newlines or ``;``."""
    entries: List[Tuple[str, Tuple[str, ...]]] = []
    for number, line in enumerate(re.split(r"[\n;]", text), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        at = f"{where}, entry {number}"
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise ValueError(f"{at}: give a key and its scopes, e.g. 'KEY search,answer' (scopes: "
                             f"{', '.join(SCOPES)})")
        key, scopes = parts
        given = _DIGEST.fullmatch(key)
        try:
            digest = given.group(1).lower() if given else hash_key(key)
        except ValueError as exc:
            raise ValueError(f"{at}: {exc}") from None
        entries.append((digest, _scopes(scopes, at)))
    digests = [d for d, _ in entries]
    if len(set(digests)) != len(digests):
        raise ValueError(f"{where}: the same key is listed twice")
    return tuple(entries)


def read_key_file(path: Union[str, "os.PathLike[str]"]) -> KeyDigests:
    """The keys of a key file (module docstring); ValueError when it holds none."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is no part of a key
    except FileNotFoundError:
        raise FileNotFoundError(f"API key file {os.fspath(path)}: no such file") from None
    keys = parse_keys(text, f"API key file {os.fspath(path)}")
    if not keys:
        raise ValueError(f"API key file {os.fspath(path)} holds no key")
    return keys


def keys_from_env(environ: Optional[Dict[str, str]] = None) -> KeyDigests:
    """The keys in :data:`KEYS_ENV` (none when it is unset or blank)."""
    return parse_keys((os.environ if environ is None else environ).get(KEYS_ENV, ""), KEYS_ENV)


def check_digests(entries: Iterable[Sequence[Any]]) -> KeyDigests:
    """``entries`` (as a ServerConfig's ``api_keys``, perhaps read back from JSON) checked and as tuples."""
    out = []
    for entry in entries:
        if len(entry) != 2 or not isinstance(entry[0], str) or not _DIGEST.fullmatch("sha256:" + entry[0]):
            raise ValueError("api_keys holds (sha256 hex digest, scopes) pairs: use parse_keys, read_key_file or "
                             "keys_from_env")
        scopes = entry[1]
        if isinstance(scopes, str) or not scopes or any(s not in SCOPES for s in scopes):
            raise ValueError(f"api_keys: scopes must be a non-empty list of {', '.join(SCOPES)}, got {scopes!r}")
        out.append((entry[0].lower(), tuple(scopes)))
    return tuple(out)


class KeyRing:
    """The keys a server accepts, by digest; :meth:`scopes_of` finds a presented key's scopes in constant time
    (module docstring)."""

    def __init__(self, entries: KeyDigests) -> None:
        self.entries = [(bytes.fromhex(digest), frozenset(scopes)) for digest, scopes in entries]

    def __bool__(self) -> bool:
        return bool(self.entries)

    def scopes_of(self, key: bytes) -> Optional[FrozenSet[str]]:
        """The scopes of ``key`` (the header's token, as bytes), None when no stored key is it. Every stored
        digest is compared, whatever matched before."""
        presented = hashlib.sha256(key).digest()
        found: Optional[FrozenSet[str]] = None
        for digest, scopes in self.entries:
            if hmac.compare_digest(presented, digest):
                found = scopes
        return found
