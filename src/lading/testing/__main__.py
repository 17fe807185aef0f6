"""``python -m lading.testing``: the local S3 until killed; its URL on the first line."""

from lading.stores.remote.localserver import main

main()
