"""Every remote call lading makes runs under one deadline rule: attempts, backoff, one message.

An attempt may take ``timeout`` seconds; a failed one (a 5xx, a reset, a short body, silence)
is tried again after ``backoff * 2**n`` seconds with jitter (a node's processes do not retry
in step), ``retries`` times; then one line says what failed, where, how often, with which
setting, and what to do. The fetcher's ranged GETs, its manifest and listing calls, uploads
and staging a folder through fsspec all take their waits and their message from here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

TIMEOUT_ENV = "LADING_REMOTE_TIMEOUT"  # seconds an attempt of a remote call may take
DEFAULT_TIMEOUT = 20.0  # an 8 MiB block at 1 MB/s still fits
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF = 0.05  # seconds before the first retry; doubled each time
SILENCE_EVERY_S = 60.0  # an endpoint's "no answer" line at most this often in a process
_silence_said: dict[str, float] = {}  # endpoint -> when its line was last printed
_silence_lock = threading.Lock()  # held for a dict update only


def env_seconds(name: str, default: float) -> float:
    """The seconds the environment variable ``name`` sets, else ``default`` (unset or empty).

    Raises:
        ValueError: naming the variable, where it is not a number above 0.
    """
    env = os.environ.get(name, "").strip()
    if not env:
        return default
    try:
        value = float(env)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name}={env!r}: expected seconds > 0, e.g. 20 or 2.5")
    return value


def remote_timeout() -> float:
    """``$LADING_REMOTE_TIMEOUT`` (seconds a remote call may take per attempt), else 20.

    Raises:
        ValueError: the variable is not a positive number.
    """
    return env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT)


@dataclass(frozen=True)
class Deadline:
    """``retries + 1`` attempts of ``timeout`` seconds each, ``backoff`` before the first retry."""

    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    backoff: float = DEFAULT_BACKOFF

    def __post_init__(self) -> None:
        if not self.timeout > 0 or self.retries < 0 or self.backoff < 0:
            raise ValueError(
                f"timeout={self.timeout}, retries={self.retries}, backoff={self.backoff}: "
                "need timeout > 0, retries >= 0, backoff >= 0"
            )

    def pauses(self) -> Iterator[float]:
        """The seconds to wait before each attempt (0 before the first)."""
        yield 0.0
        for n in range(self.retries):
            yield self.backoff * 2**n * random.uniform(0.5, 1.5)

    @property
    def total(self) -> float:
        """The longest a call can take: every attempt and the longest pauses between."""
        return (self.retries + 1) * self.timeout + self.backoff * 1.5 * (2**self.retries)

    def gave_up(self, what: str, endpoint: str, last: BaseException | None, note: str = "") -> str:
        """The one line of a call that failed every attempt: what, where, the setting, the fix
        (a longer timeout only where the last attempt timed out: a refused connection or an
        unknown host is not helped by waiting longer)."""
        timed_out = isinstance(last, (asyncio.TimeoutError, concurrent.futures.TimeoutError))
        reason = "timed out" if timed_out else failure(last)
        fix = ", or raise the timeout" if timed_out or "timed out" in reason else " at that address"
        return (
            f"{what} (endpoint {endpoint or 'the default endpoint'}) failed {self.retries + 1} "
            f"times, each allowed {self.timeout:g}s (timeout= or ${TIMEOUT_ENV}; "
            f"retries={self.retries}); last: {reason}. Check that the endpoint is up and "
            f"reachable{fix}{note}"
        )

    def no_answer(self, what: str, endpoint: str, attempt: int) -> None:
        """Say on stderr, in one line, that attempt ``attempt`` (1-based) of ``what`` had no
        answer within its time and is being retried: a server that never answers is otherwise
        ``total`` seconds of silence. Once an endpoint a minute in a process (many GETs in
        flight time out together); nothing after the last attempt (its error says it)."""
        if attempt > self.retries:
            return
        where = endpoint or "the default endpoint"
        now = time.monotonic()
        with _silence_lock:
            if now - _silence_said.get(where, -SILENCE_EVERY_S) < SILENCE_EVERY_S:
                return
            _silence_said[where] = now
        print(
            f"lading: no answer from {where} after {self.timeout:g} s ({what}), retrying "
            f"{attempt}/{self.retries} (a longer wait: timeout= or ${TIMEOUT_ENV})",
            file=sys.stderr,
            flush=True,
        )


def failure(error: BaseException | None) -> str:
    """The first line of ``error`` (at most 300 characters), with the operating system's
    reason where a client's debug dump holds it further down: obstore says "error sending
    request" and, 20 lines below, ``message: "Connection refused"``."""
    text = str(error).strip() if error is not None else ""
    first = (text.splitlines() or [type(error).__name__])[0][:300]
    found = re.findall(r'message: "([^"\n]{1,120})"', text)
    if found and found[-1] not in first:
        first += f" ({found[-1]})"
    return first
