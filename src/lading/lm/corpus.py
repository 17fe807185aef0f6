"""TokenCorpus: every document's token ids in one memory-mapped ragged array.

``tokens.bin`` holds the ids back to back in the smallest dtype the vocabulary allows (uint16 up
to 65,536 entries: 2 bytes a token, a quarter of fastai v1's int64), each document followed by
an end-of-text id when ``append_eos``; ``tokens.off`` holds ``n + 1`` uint64 offsets. The build
streams the source once, tokenizes batches of documents in the tokenizers library's threads,
and renames the finished directory into place (the same atomic build as the stores).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading._version import __version__
from lading.disk import (
    OFFSET_DTYPE,
    MappedFile,
    RaggedWriter,
    build_lock,
    current_version,
    publish,
    read_meta,
    remove_dead_temps,
    staging,
    write_file,
    write_meta,
)
from lading.lm.texts import iter_texts, source_identity
from lading.stores.tokens import describe_tokenizer, load_tokenizer, token_dtype

FORMAT_NAME = "lading.tokens"
EOS_CANDIDATES: tuple[str, ...] = ("<|endoftext|>", "</s>", "<eos>", "[SEP]", "<|end|>")
BATCH_DOCS = 1000  # documents per encode_batch call


def find_eos(tokenizer: Any, eos_token: str | None = None) -> int:
    """Id of the end-of-text token (``eos_token``, or the first of the usual names present)."""
    names = (eos_token,) if eos_token else EOS_CANDIDATES
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return int(token_id)
    raise ValueError(
        f"the tokenizer has none of {list(names)}; pass eos_token=, or "
        "append_eos=False to keep documents unseparated"
    )


class TokenCorpus:
    """A tokenized corpus opened as memory maps; see :meth:`build` and :meth:`open`."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path, self.meta = path, meta
        self.dtype = np.dtype(meta["dtype"])
        self.tokens: npt.NDArray[Any] = MappedFile(path / "tokens.bin").array(self.dtype)
        self.offsets: npt.NDArray[np.uint64] = MappedFile(path / "tokens.off").array(OFFSET_DTYPE)
        if len(self.offsets) != meta["documents"] + 1 or int(self.offsets[-1]) != len(self.tokens):
            raise ValueError(f"{path}: tokens.off does not describe tokens.bin; rebuild")

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, stage_to: str | os.PathLike[str] | None = None
    ) -> TokenCorpus:
        """Map a corpus built by :meth:`build` (checked: format, version, file sizes); with
        ``stage_to``, a node-local copy in ``stage_to/<name>`` (:func:`lading.disk.stage.stage`)."""
        if stage_to is not None:
            from lading.disk.stage import stage

            name = os.fspath(path).rstrip("/").rsplit("/", 1)[-1]
            path = stage(path, Path(stage_to) / name)
        root = Path(path)
        return cls(root, read_meta(root, FORMAT_NAME))

    def __reduce__(self) -> tuple[Any, ...]:
        return (TokenCorpus.open, (str(self.path),))  # pickles as its path; reopens the maps

    @classmethod
    def build(
        cls,
        source: str | os.PathLike[str],
        dest: str | os.PathLike[str],
        tokenizer: Any,
        append_eos: bool = True,
        *,
        eos_token: str | None = None,
        split: str = "blank",
        overwrite: bool = False,
        progress: bool | None = None,
    ) -> TokenCorpus:
        """Tokenize every document of ``source`` into ``dest``.

        Args:
            source: text file(s), JSONL, WikiExtractor output, a folder or a lading store
                (see :mod:`lading.lm.texts`).
            dest: the corpus directory to create.
            tokenizer: a ``tokenizers.Tokenizer``, HF fast tokenizer or ``tokenizer.json`` path.
            append_eos: end every document with the end-of-text id, so the model sees where
                one document stops and the next (in shuffled order) begins.
            eos_token: name of that token (default: the first usual name the vocabulary has).
            split: how plain text files divide into documents.
            overwrite: rebuild even if ``dest`` holds a corpus of this source and tokenizer.
            progress: show a progress bar (default: on a terminal).
        """
        tok = load_tokenizer(tokenizer)
        info = describe_tokenizer(tok)
        eos = find_eos(tok, eos_token) if append_eos else None
        target = Path(dest)
        recipe = {
            "source": str(Path(source).resolve()),
            "source_identity": source_identity(source),  # an edited source is tokenized again
            "tokenizer": info["sha256"],
            "append_eos": append_eos,
            "eos_id": eos,
            "split": split,
        }
        with build_lock(target):
            remove_dead_temps(target)
            if not overwrite and _reusable(target, recipe):
                return cls.open(target)
            with staging(target) as tmp:
                _write(tmp, source, tok, info, eos, split, recipe, progress)
                publish(tmp, target)
        return cls.open(target)

    def __len__(self) -> int:
        return int(self.meta["documents"])

    @property
    def n_tokens(self) -> int:
        """Tokens in all documents (end-of-text ids included)."""
        return len(self.tokens)

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def eos_id(self) -> int | None:
        return self.meta["eos_id"]

    def lengths(self) -> npt.NDArray[np.int64]:
        """Tokens per document (one int64 per document: the corpus's small index)."""
        return np.diff(self.offsets).astype(np.int64)

    def document(self, i: int) -> npt.NDArray[Any]:
        """Token ids of document ``i`` (a view of the map)."""
        return self.tokens[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def tokenizer(self) -> Any:
        """The tokenizer the corpus was built with (a copy is kept beside the tokens)."""
        return load_tokenizer(self.path / "tokenizer.json")


def _reusable(target: Path, recipe: dict[str, Any]) -> bool:
    try:
        meta = read_meta(target, FORMAT_NAME)
    except Exception:
        return False
    return bool(meta.get("recipe") == recipe)


def _write(
    directory: Path,
    source: str | os.PathLike[str],
    tok: Any,
    info: dict[str, Any],
    eos: int | None,
    split: str,
    recipe: dict[str, Any],
    progress: bool | None,
) -> None:
    from tqdm.auto import tqdm

    started = time.perf_counter()
    dtype = token_dtype(info["vocab_size"])
    column = RaggedWriter(directory, "tokens", dtype.itemsize)
    pending: list[str] = []
    bar = tqdm(
        unit=" docs",
        desc=f"tokenizing {Path(source).name}",
        disable=None if progress is None else not progress,
    )

    def flush() -> None:
        encodings = tok.encode_batch(pending, add_special_tokens=False)
        ids = [[*e.ids, eos] if eos is not None else e.ids for e in encodings]
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        flat = np.fromiter((t for doc in ids for t in doc), dtype, int(lengths.sum()))
        column.append_many(flat.tobytes(), lengths * dtype.itemsize)
        bar.update(len(pending))
        pending.clear()

    for text in iter_texts(source, split):
        pending.append(text)
        if len(pending) >= BATCH_DOCS:
            flush()
    if pending:
        flush()
    bar.close()
    files = column.finish()
    files["tokenizer.json"] = write_file(directory / "tokenizer.json", tok.to_str().encode())
    documents = len(column)
    if documents == 0:
        raise ValueError(f"{source} holds no documents")
    write_meta(
        directory,
        {
            "format": FORMAT_NAME,
            "version": current_version(FORMAT_NAME),
            "lading_version": __version__,
            "documents": documents,
            "tokens": int(files["tokens.bin"]["size"] // dtype.itemsize),
            "dtype": dtype.str,
            "vocab_size": info["vocab_size"],
            "eos_id": eos,
            "recipe": recipe,
            "seconds": round(time.perf_counter() - started, 3),
            "files": files,
        },
    )
