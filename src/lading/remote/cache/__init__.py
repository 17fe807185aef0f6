"""The node cache: one folder a node, shared by every process, bounded by construction.

- :mod:`.node`: the folder as a process uses it (one of each a process and folder);
- :mod:`.regions`: the payload, one file of exactly the cap cut into regions;
- :mod:`.ledger`: SQLite rows of where each block lives, who fetches it, when it is next used;
- :mod:`.places`: where a claimed block goes, and which region eviction frees;
- :mod:`.owners`: who owns a claim (a token its process holds a lock on);
- :mod:`.fill`: the thread that writes fetched blocks in;
- :mod:`.reads`: one snapshot's view: ranges read at a step, fetched ahead;
- :mod:`.planner`: what one loader tells it ahead (its order, its window);
- :mod:`.around`: a loader's GETs of ranges the cache would not keep, held until read;
- :mod:`.damaged`: a damaged ledger set aside.
"""

from lading.remote.cache.around import AroundGets
from lading.remote.cache.node import Node, node_of
from lading.remote.cache.planner import Planner
from lading.remote.cache.reads import NodeCache, Span

__all__ = ["AroundGets", "Node", "NodeCache", "Planner", "Span", "node_of"]
