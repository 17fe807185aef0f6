"""LadingTrainer beside the Trainer's own evaluation and saving, with lading's collator as the
Trainer's ``data_collator`` (how a user sets up ``eval_dataset``): a review found ``predict``
dropping a score a batch and the first checkpoint failing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.e2e  # a framework's trainer: see the e2e marker in pyproject.toml

GROUP, QUERIES = 4, 10


def setup(tmp: Path) -> tuple[Any, Any, Any]:
    """A store of 40 tokenized documents, groups of ``GROUP`` over ``QUERIES`` queries, and
    the cross-encoder collator of the store."""
    import lading
    from lading import ir
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    texts = [f"document {i} about topic {i % 7} and word{i % 11}" for i in range(40)]
    queries = {f"q{i}": f"topic {i % 7} word{i}" for i in range(QUERIES)}
    tok = save_tokenizer(train_tokenizer([*texts, *queries.values()], "wordpiece", 300),
                         tmp / "tokenizer.json")  # fmt: skip
    (tmp / "docs.tsv").write_text("".join(f"d{i}\t{t}\n" for i, t in enumerate(texts)))
    store = lading.build_store(tmp / "docs.tsv", tmp / "docs.store", tokenizer=tok,
                               progress=False)  # fmt: skip
    qrels = {q: {f"d{3 * i}": 1} for i, q in enumerate(queries)}
    groups = ir.TrainingGroups(store, queries, qrels, group_size=GROUP, seed=1, sampling="random")
    return store, groups, ir.CrossEncoderCollator(store, max_length=32, max_query_length=12)


def trainer(tmp: Path, groups: Any, collate: Any, **extra: Any) -> Any:
    import torch
    from transformers import TrainingArguments

    import lading
    from lading.integrations.hf_trainer import LadingTrainer
    from lading.ir import CrossEncoder
    from lading.ir.model import tiny_bert_config

    torch.manual_seed(0)
    model = CrossEncoder.from_config(tiny_bert_config(collate.tokenizer.get_vocab_size()))
    args = TrainingArguments(
        output_dir=str(tmp / "run"), report_to="none", use_cpu=True, disable_tqdm=True,
        per_device_eval_batch_size=3, remove_unused_columns=False, label_names=["labels"],
        **extra,
    )  # fmt: skip
    loader = lading.loader(groups, 4, collate_fn=collate, seed=2, world=lading.World(0, 1))
    return LadingTrainer(model=model, args=args, train_loader=loader, data_collator=collate)


def test_predict_gives_a_row_of_scores_a_group_in_order(tmp_path: Path) -> None:
    """The loss's ``outputs`` was the bare logits tensor, which the Trainer's prediction step
    cut as a model output (``outputs[1:]``): the first score of every batch was lost and the
    rest shifted against the labels (190 predictions for 200 labels). And a batch's rows
    were taken for its items: the last batch was cut to the groups left as rows (37 scores
    for 40 rows, 10 groups in batches of 3). Now a row a group: ``[groups, group_size]``."""
    import torch

    _, groups, collate = setup(tmp_path)
    ours = trainer(tmp_path, groups, collate)
    found = ours.predict(groups)
    assert found.predictions.shape == (QUERIES, GROUP) == found.label_ids.shape
    ours.model.eval()
    for first in (0, 9):  # a whole batch's, and the last batch's one group
        batch = collate([groups[i] for i in range(first, min(first + 3, QUERIES))])
        with torch.no_grad():
            ids, mask, types = (batch[k] for k in ("input_ids", "attention_mask", "token_type_ids"))
            direct = ours.model(ids, mask, types).reshape(-1, GROUP).float()
        got = torch.as_tensor(found.predictions[first : first + len(direct)])
        assert torch.allclose(got, direct, atol=1e-5), first
        assert (
            found.label_ids[first : first + len(direct)].tolist()
            == batch["labels"].reshape(-1, GROUP).tolist()
        )


def test_a_checkpoint_with_lading_collator_as_data_collator_is_whole(tmp_path: Path) -> None:
    """The Trainer saves ``data_collator.tokenizer`` with ``save_pretrained``, which a
    ``tokenizers.Tokenizer`` lacks: the first checkpoint raised AttributeError and was left
    without its trainer_state.json. Now the tokenizer is saved as its tokenizer.json."""
    from tokenizers import Tokenizer

    _, groups, collate = setup(tmp_path)
    ours = trainer(tmp_path, groups, collate, max_steps=2, save_strategy="steps", save_steps=2)
    ours.train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert (checkpoint / "trainer_state.json").is_file()
    saved = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    assert saved.to_str() == collate.tokenizer.to_str()


def test_only_a_score_a_row_is_reshaped_to_groups() -> None:
    """A review: any tensor whose size divided by the group size was reshaped, so a model's
    several logits a row (the Trainer's own loss, ``compute_loss_func``) were mixed across
    rows, and a model's several outputs left as they were beside reshaped labels."""
    import torch

    from lading.integrations.hf_trainer import _a_score_a_row

    labels = torch.zeros(12)
    assert _a_score_a_row(torch.zeros(12), labels, 4)
    assert _a_score_a_row(torch.zeros(12, 1), labels, 4)
    assert not _a_score_a_row(torch.zeros(12, 4), labels, 4)  # 4 logits a row
    assert not _a_score_a_row((torch.zeros(12), torch.zeros(12, 8)), labels, 4)
    assert not _a_score_a_row(torch.zeros(12), torch.zeros(3, 4), 4)
