"""The remote data plane: bytes of objects in a bucket, read as plan -> fetch -> cache.

One room below the three workloads (documents by id, token windows, parquet row groups) and
the stores, above the disk room: it knows byte ranges of objects, never what they hold.

- the seam: :mod:`~lading.remote.objects` (ranged reads of any backend); a client for a URL
  from :mod:`~lading.remote.clients` (:mod:`~lading.remote.client_obstore` where usable, else
  :mod:`~lading.remote.client_fsspec`);
- plan: :mod:`~lading.remote.ranges` (the byte ranges some batches need, coalesced into GETs)
  and :mod:`~lading.remote.schedule` (the epoch's reads by step: what eviction keeps);
- fetch: :mod:`~lading.remote.fetch`, many GETs in flight from one thread, retried under one
  deadline, under one cap for the node (:mod:`~lading.remote.slots`);
- cache: :mod:`lading.remote.cache`, the node cache every process of a node shares;
- staging: :mod:`~lading.remote.stage`, a snapshot's small files copied to the node once;
- how it is read: :mod:`~lading.remote.settings`.

A store in object storage (:mod:`lading.stores.remote`), a token corpus
(:mod:`lading.lm.remote`) and parquet objects (:mod:`lading.tabular.remote`) read through it.
"""
