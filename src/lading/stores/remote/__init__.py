"""A packed store in object storage: its manifest (:mod:`~lading.stores.remote.manifest`), its
columns' rows as byte ranges (:mod:`~lading.stores.remote.columns`) and the store read by id
(:mod:`~lading.stores.remote.store`), all reading through the remote plane
(:mod:`lading.remote`). Building into object storage is the build room's
(:mod:`lading.stores.building.upload`); a local S3 to try it offline is
:class:`lading.testing.LocalS3`.
"""
