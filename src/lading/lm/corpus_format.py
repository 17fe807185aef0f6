"""The token corpus format's name and the files a corpus snapshot holds: what the local reader
(:mod:`lading.lm.corpus`) and the object-storage reader (:mod:`lading.lm.remote`) both check."""

from __future__ import annotations

FORMAT_NAME = "lading.tokens"
TOKENS = "tokens.bin"  # every document's token ids back to back
OFFSETS = "tokens.off"  # n + 1 uint64 offsets into TOKENS
TOKENIZER = "tokenizer.json"  # the tokenizer the ids came from
MERGED_VERSION = 3  # a corpus built in shards: ``parts`` read in place (lading.lm.parts)
