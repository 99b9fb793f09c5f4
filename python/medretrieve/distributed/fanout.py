"""Shard actors on Ray and the fan-out of one call to many of them under a deadline.

:class:`ShardSet` starts one Ray actor per shard (:class:`~.shard_actor.ShardSearcher`, the collection opened
memory-mapped) with ``max_restarts=-1``: an actor whose process dies is started again by Ray and reopens its
shard. :meth:`ShardSet.call` sends one method call to many shards at once and waits at most ``timeout_s``; every
shard ends up in exactly one of three places of the returned :class:`Outcome`: answered (its result), missed (the
wait ended first; its late answer is dropped) or failed (the actor died or raised; the message is kept).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type

from .shard_actor import ShardSearcher


def require_ray():
    """The ``ray`` module, or ImportError saying how to install it."""
    try:
        import ray
    except ImportError:  # pragma: no cover - CI installs the extra
        raise ImportError("medretrieve.distributed needs Ray: pip install 'medretrieve[distributed]'",
                          name="ray") from None
    return ray


def ensure_ray(address: Optional[str] = None, **init_kwargs: Any):
    """Connect to Ray (``address``: a cluster such as ``ray://host:10001`` or ``auto``; None: the running one or a
    new local one) unless this process is connected already; returns the ``ray`` module."""
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(address=address, **init_kwargs)
    return ray


@dataclass
class Outcome:
    """Results of one fan-out by shard index, and the shards that missed the wait or failed."""

    results: Dict[int, Any] = field(default_factory=dict)
    missed: List[int] = field(default_factory=list)
    failed: Dict[int, str] = field(default_factory=dict)


class ShardSet:
    """One Ray actor per shard directory (module docstring).

    ``actor_options``: Ray actor options (e.g. ``num_cpus``, ``resources``, ``max_concurrency``; defaults:
    ``max_restarts=-1``, ``max_concurrency=4`` so one shard serves several searches at once). ``searcher``: the
    actor class, :class:`ShardSearcher` or a subclass. ``name_prefix``: name the actors ``<prefix><i>`` (detached,
    reused when they exist), so several processes, e.g. Ray Serve replicas, share one set of shard actors.
    """

    def __init__(self, directories: Sequence[Path], actor_options: Optional[Mapping[str, Any]] = None,
                 searcher: Type[ShardSearcher] = ShardSearcher, name_prefix: Optional[str] = None,
                 address: Optional[str] = None) -> None:
        ray = ensure_ray(address)
        self.directories = [Path(d) for d in directories]
        names = [d.name for d in self.directories]
        self.names = names if len(set(names)) == len(names) else [str(d) for d in self.directories]
        options: Dict[str, Any] = {"max_restarts": -1, "max_task_retries": 0, "max_concurrency": 4}
        options.update(actor_options or {})
        remote = ray.remote(searcher)
        self.actors = []
        self._owned = name_prefix is None
        for i, d in enumerate(self.directories):
            opts = dict(options)
            if name_prefix is not None:
                opts.update(name=f"{name_prefix}{i}", get_if_exists=True, lifetime="detached")
            self.actors.append(remote.options(**opts).remote(str(d.resolve())))

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, method: str, args: Mapping[int, Tuple[Any, ...]], timeout_s: Optional[float]) -> Outcome:
        """``method(*args[i])`` on shard ``i`` for every ``i`` in ``args`` at once; waits at most ``timeout_s``
        (None: until every shard answered or failed). With no time left (``timeout_s <= 0``) nothing is sent and
        every shard counts as missed: whether a shard could answer in the instant of one poll is up to the
        scheduler, and an expired request must not cost the shards work."""
        if timeout_s is not None and timeout_s <= 0:
            return Outcome(missed=sorted(args))
        ray = require_ray()
        refs = {getattr(self.actors[i], method).remote(*a): i for i, a in args.items()}
        out = Outcome()
        pending = list(refs)
        end = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
        while pending:
            left = None if end is None else max(end - time.monotonic(), 0.0)
            ready, pending = ray.wait(pending, num_returns=1 if left != 0.0 else len(pending), timeout=left)
            for ref in ready:
                try:
                    out.results[refs[ref]] = ray.get(ref)
                except Exception as exc:  # a dead actor or an error in the shard: the others still count
                    out.failed[refs[ref]] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
            if end is not None and time.monotonic() >= end:
                break
        out.missed = sorted(refs[ref] for ref in pending)
        return out

    def everywhere(self, method: str, *args: Any, timeout_s: Optional[float] = None) -> Outcome:
        """The same call on every shard."""
        return self.call(method, {i: args for i in range(len(self))}, timeout_s)

    def close(self) -> None:
        """Stop the shard actors this set started (shared, named actors are left to their other users)."""
        if self._owned:
            ray = require_ray()
            for actor in self.actors:
                ray.kill(actor, no_restart=True)
        self.actors = []


def default_name_prefix(directories: Sequence[Path]) -> str:
    """A name prefix for shared shard actors of these directories (one set per deployment, per host user)."""
    import hashlib

    key = "\n".join(str(Path(d).resolve()) for d in directories)
    return f"medretrieve-shard-{os.getuid()}-{hashlib.blake2b(key.encode(), digest_size=6).hexdigest()}-"
