"""A Ray token sink into s3:// whose merge is refused names the URL, not its scratch mirror
(a folder already deleted when the error is read). The sink's phases are driven in this process,
as test_ray_tokens.py's first test does (no Ray cluster)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import word_tokenizer
from lading.errors import SourceError
from lading.testing import LocalS3

pytest.importorskip("ray")
pytest.importorskip("tokenizers")
pa = pytest.importorskip("pyarrow")


def test_a_job_of_no_documents_is_refused_naming_the_url(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(["alpha", "beta"], tmp_path / "t.json")
    url = f"s3://{bucket}/a"
    sink = LadingTokenDatasink(url, tok, on_error="skip", cache=tmp_path / "c")
    sink.on_write_start()
    nulls = pa.table({"text": pa.array([None, None], pa.string())})
    ret = sink.write([nulls], SimpleNamespace(task_idx=0))
    with pytest.raises(SourceError, match="no documents in any shard") as e:
        sink.on_write_complete(SimpleNamespace(write_returns=[ret]))
    assert e.value.path == url and str(tmp_path) not in str(e.value)
