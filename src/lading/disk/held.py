"""Whether another process holds an ``flock`` on a file: the liveness probe of the files a
live process keeps locked for its life (a node cache's owner tokens, a scratch folder's mark).

A shared, non-blocking ``flock`` on a file an owner holds exclusively fails at once while the
owner lives, and the kernel drops the lock when the owner dies, however it dies. Callers decide
what "cannot tell" means for them: a missing file, or a file system without locks.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def flock_held(path: Path, follow: bool = True) -> bool | None:
    """True where a process holds ``path``'s lock, False where none does, None where it cannot
    be told (no such file, or one that cannot be opened or locked here); ``follow``: False
    refuses a symbolic link at ``path`` (None)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False
