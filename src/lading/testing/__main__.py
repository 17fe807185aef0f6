"""``python -m lading.testing``: the local S3 until killed; its URL on the first line."""

from lading.testing.localserver import main

main()
