"""Stores in object storage, read as a pipeline: plan -> fetch -> cache -> store.

- the seam: :mod:`~lading.stores.remote.objects` (ranged reads of any backend),
  :mod:`~lading.stores.remote.clients` opens one (:mod:`~lading.stores.remote.client_obstore`
  where usable, else :mod:`~lading.stores.remote.client_fsspec`);
- plan: :mod:`~lading.stores.remote.plan`, the byte ranges some batches need, sorted and
  coalesced into GETs within a waste budget;
- fetch: :mod:`~lading.stores.remote.fetch`, many GETs in flight from one thread, retries with
  backoff, under one cap for the node (:mod:`~lading.stores.remote.slots`);
- cache: ``cache/``, the node cache with a hard byte cap: the view one store has of it
  (``cache/__init__.py``), its shared ledger (:mod:`~lading.stores.remote.cache.ledger`), the
  writer thread that fills fetched blocks (:mod:`~lading.stores.remote.cache.fill`) and the
  eviction policies (:mod:`~lading.stores.remote.cache.evict`), the epoch's whole order that
  eviction reads (:mod:`~lading.stores.remote.cache.order`), what the cache is told ahead
  (:mod:`~lading.stores.remote.cache.planning`), the ledger's SQL and disk budget
  (:mod:`~lading.stores.remote.cache.queries`, :mod:`~lading.stores.remote.cache.footprint`),
  the node's counters (:mod:`~lading.stores.remote.cache.stats`) and a damaged ledger set
  aside (:mod:`~lading.stores.remote.cache.damaged`);
- store: :mod:`~lading.stores.remote.store` (``RemoteStore``), over the
  :mod:`~lading.stores.remote.manifest` it pinned, the index staged to the node
  (:mod:`~lading.stores.remote.stage`) and its :mod:`~lading.stores.remote.columns`; how it is
  read: :mod:`~lading.stores.remote.settings`.

Building into object storage is the build room's (:mod:`lading.stores.building.upload`); a local
S3 to try all this offline is :class:`lading.testing.LocalS3`.
"""
