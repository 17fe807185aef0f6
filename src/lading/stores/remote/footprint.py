"""What the node cache's files take on disk, and so how many bytes of blocks a cap holds.

The ledger's files are its database, its WAL and the WAL's ``-shm`` map. From
:data:`DISK_FLOOR` up, a cap bounds all three: the WAL gets an allowance (an eighth of the cap,
64 KiB to 8 MiB; checkpointed and truncated at half of it), ``-shm`` and the schema a fixed
share, and the blocks the rest, each block charged :data:`BLOCK_COST` besides its bytes for its
rows in the tables and indexes (measured: 1 KiB pages, 100-600-byte blocks). Below the floor an
empty ledger alone (~70 KB) would not fit: only the blocks' bytes are bounded there.
"""

from __future__ import annotations

PAGE = 1024
BLOCK_COST = 160  # bytes a block costs besides its payload: its rows in blocks, 4 indexes, cells
DISK_FLOOR = 512 << 10  # below this cap only the blocks are bounded (an empty ledger: ~70 KB)
FIXED = 160 * 1024  # the -shm map (32 KiB), the schema and a page per table and index, spare


def wal_allowance(cap: int) -> int:
    """Bytes the WAL may hold beside the blocks: an eighth of the cap, 64 KiB to 8 MiB."""
    return min(8 << 20, max(64 << 10, cap // 8))


def block_cost(cap: int) -> int:
    """Bytes a block is charged besides its payload under ``cap`` (0 below the floor)."""
    return BLOCK_COST if cap >= DISK_FLOOR else 0


def budget(cap: int) -> int:
    """Bytes of blocks (payload and :func:`block_cost`) a node cache of ``cap`` bytes holds:
    the cap less the WAL's allowance and the fixed files, from :data:`DISK_FLOOR` up."""
    return cap - wal_allowance(cap) - FIXED if cap >= DISK_FLOOR else cap
