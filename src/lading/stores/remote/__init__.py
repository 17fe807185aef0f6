"""Stores in object storage: documents by id through ranged GETs and a bounded node cache.

- :mod:`~lading.stores.remote.objects`: the object-store seam; :mod:`~lading.stores.remote.clients`
  opens one (obstore or fsspec backend).
- :mod:`~lading.stores.remote.ranges`: the range planner (sort, coalesce within a waste budget).
- :mod:`~lading.stores.remote.fetch`: many GETs in flight, retries with backoff.
- :mod:`~lading.stores.remote.ledger`, :mod:`~lading.stores.remote.evict`,
  :mod:`~lading.stores.remote.cache`, :mod:`~lading.stores.remote.fill`: the node cache (hard
  byte cap, eviction by next use; one writer thread fills fetched blocks).
- :mod:`~lading.stores.remote.localserver`: a local S3 with latency, for tests and trying out.
"""
