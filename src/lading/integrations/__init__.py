"""Adapters that put lading's stores and loaders inside the frameworks people train with.

Each module imports its framework on use and sits behind an extra: ``datasets`` (HF datasets:
stores from datasets, parquet and Arrow; training groups exported as datasets), ``hf_trainer``
(the HF ``Trainer`` reading a lading loader, resumable from the Trainer's checkpoints),
``sentence_transformers`` (``SentenceTransformerTrainer``/``CrossEncoderTrainer`` on training
groups), ``pyterrier`` (document text from a store in a PyTerrier pipeline) and
``transformers_lm`` (an LM batch as a transformers causal LM's keyword arguments). ``rows`` holds
the sentence-transformers row formats both the trainers and the export use.
"""
