"""PyTerrier pipelines read document text from a lading store, without Java (real data: ADI)."""

from __future__ import annotations

from pathlib import Path

import pytest

pt = pytest.importorskip("pyterrier")

from integration_data import adi  # noqa: E402

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml


def test_a_pipeline_adds_text_and_a_text_scorer_is_evaluated(
    data_dir: Path, tmp_path: Path
) -> None:
    import pandas as pd

    from lading.integrations.pyterrier import PyTerrierStore, store_text_loader

    data = adi(data_dir, tmp_path)
    run = pt.io.read_results(str(data.folder / "bm25.run"))
    topics = pd.DataFrame({"qid": list(data.queries), "query": list(data.queries.values())})
    qrels = pt.io.read_qrels(str(data.folder / "qrels.txt"))
    bm25 = pt.Transformer.from_df(run)

    with_text = (bm25 % 10 >> store_text_loader(data.store))(topics)
    assert len(with_text) == len((bm25 % 10)(topics)) > 300  # some queries have < 10 results
    assert with_text["text"].tolist() == data.store.get_many(with_text["docno"].tolist())
    assert {"qid", "docno", "score", "rank"} <= set(with_text.columns)

    # the same through PyTerrier's own get_text and the HasTextLoader protocol
    via_get_text = (bm25 % 10 >> pt.text.get_text(PyTerrierStore(data.store), "text"))(topics)
    assert via_get_text["text"].tolist() == with_text["text"].tolist()

    # a text-based reranker, end to end: query-word overlap over the loaded text
    def overlap(row: pd.Series) -> float:
        return float(len(set(row["query"].lower().split()) & set(row["text"].split())))

    rerank = bm25 % 20 >> store_text_loader(data.store) >> pt.apply.doc_score(overlap)
    table = pt.Experiment(
        [bm25 % 20, rerank], topics, qrels, ["map", "P.5"], names=["bm25", "overlap"]
    )
    assert list(table["name"]) == ["bm25", "overlap"]
    assert (table["map"] > 0).all()


def test_an_unknown_docno_is_named(data_dir: Path, tmp_path: Path) -> None:
    import pandas as pd

    from lading.integrations.pyterrier import store_text_loader

    data = adi(data_dir, tmp_path)
    frame = pd.DataFrame({"qid": ["1", "1"], "docno": ["3", "no-such-doc"]})
    with pytest.raises(KeyError, match="no-such-doc"):
        store_text_loader(data.store)(frame)
    filled = store_text_loader(data.store, on_missing="empty")(frame)
    assert filled["text"].tolist() == [data.store["3"], ""]
