"""The build room: what writes a store, read by the read room (``stores/``).

- :mod:`~lading.stores.building.build`: ``build_store`` (one builder per destination, atomic,
  reused when nothing changed), ``build_shard`` and ``merge_store`` (a build in parallel);
- :mod:`~lading.stores.building.inputs`: the input files, dealt to shards by byte ranges;
- :mod:`~lading.stores.building.writer`: one shard's files, written in one pass;
- :mod:`~lading.stores.building.parallel`: shard ``i`` of ``n`` by any worker, then one merge;
  :mod:`~lading.stores.building.merge`: the id index over all shards and the manifest;
- :mod:`~lading.stores.building.group`: building under an initialised process group;
- :mod:`~lading.stores.building.upload`: a store built here, uploaded into object storage.
"""
