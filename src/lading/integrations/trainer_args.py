"""The HF ``TrainingArguments`` that shape training data, checked against a lading loader.

The Trainer builds its DataLoader from these arguments; a lading loader is built by its caller
(``lading.loader(...)``, ``PartitionedParquet(...)``, ``LanguageModelLoader(...)``), so an
argument set to something the loader does not do would be silently ignored. Each is either
what the loader already does or refused, naming the argument and where the setting goes
instead. Only values other than the argument's default are checked (``dataloader_pin_memory``
defaults to True in the Trainer and to False in lading: a default is no request).

``per_device_train_batch_size`` is the loader's batch size: another one set is refused, the
default gives way to the loader's (the Trainer's logs and counts then say what it trains).

``seed`` and ``data_seed`` order the data in the Trainer's own route (its sampler is shuffled by
``data_seed``, else ``seed``); a lading loader is shuffled by the ``seed=`` it was built with,
so one set to another value is refused, naming the loader's seed and the fix (a seed sweep would
otherwise train one data order for every seed without a word).
"""

from __future__ import annotations

from typing import Any

from lading.integrations.epochs import refuse_epochs_of_varying_length
from lading.loading.loader import Workers
from lading.loading.resumable import Resumable

SAMPLING_REFUSED = ("group_by_length", "batch_rebalance")


def _start_method(context: Any) -> str | None:
    if context is None:
        return None
    return str(getattr(context, "get_start_method", lambda: context)())


def _loader_settings(loader: Resumable) -> dict[str, Any]:
    """What the loader does, keyed by the TrainingArguments field that would ask for it: its
    state's fingerprint and its :class:`~lading.loading.loader.Workers` (every lading loader
    has them, a prefetcher passes them on; a loader of another kind reads in its process)."""
    orders = loader.state_dict()["fingerprint"]
    workers = getattr(loader, "workers", None) or Workers()
    count = workers.num_workers
    return {
        "dataloader_drop_last": bool(orders.get("drop_partial_batch", False)),
        "dataloader_num_workers": count,
        "dataloader_pin_memory": bool(workers.pin_memory),
        "dataloader_persistent_workers": bool(count and workers.persistent_workers is not False),
        "dataloader_prefetch_factor": (workers.prefetch_factor or 2) if count else None,
        "dataloader_multiprocessing_context": workers.multiprocessing_context if count else None,
    }


FIXES = {
    "dataloader_drop_last": "equalize='truncate', drop_partial_batch=True",
    "dataloader_num_workers": "num_workers=",
    "dataloader_pin_memory": "pin_memory=",
    "dataloader_persistent_workers": "persistent_workers= (with num_workers > 0)",
    "dataloader_prefetch_factor": "prefetch_factor= (with num_workers > 0)",
    "dataloader_multiprocessing_context": "multiprocessing_context= (with num_workers > 0)",
}


def check_trainer_arguments(args: Any, loader: Resumable) -> None:
    """Refuse any data-shaping argument ``args`` sets that ``loader`` does not already do.

    Raises:
        ValueError: naming the argument, its value, what the loader does and the fix.
    """
    defaults = type(args).__dataclass_fields__
    has = _loader_settings(loader)
    for name, fix in FIXES.items():
        if not hasattr(args, name):
            continue  # an older transformers without this argument
        value = getattr(args, name)
        if name == "dataloader_multiprocessing_context":
            value = _start_method(value)
        if value == defaults[name].default or value == has[name]:
            continue
        raise ValueError(
            f"TrainingArguments({name}={value!r}) does not reach a lading loader, which is "
            f"built by its caller (this one has {has[name]!r}): pass {fix} to the loader "
            f"(lading.loader(..., {fix.split(' ')[0]}...)) and leave {name} at its default"
        )
    if getattr(args, "dataloader_in_order", True) is False:
        raise ValueError(
            "TrainingArguments(dataloader_in_order=False) is not supported: a lading loader "
            "yields its batches in order, which its exact resume relies on; leave it True"
        )
    _check_sampling(args, loader)
    check_batch_size(args, loader)
    check_seeds(args, loader)
    _check_split_batches(args)
    refuse_epochs_of_varying_length(loader, "the HF Trainer")


def _check_split_batches(args: Any) -> None:
    """Refuse ``accelerator_config.split_batches``: the Trainer's own route then splits each
    batch over the ranks, while a lading loader gives every rank a whole batch of its own (the
    global batch and the steps would be the world size's multiple of what was asked)."""
    config = getattr(args, "accelerator_config", None)
    if config is not None and getattr(config, "split_batches", False):
        raise ValueError(
            "TrainingArguments(accelerator_config={'split_batches': True}) splits each batch "
            "over the ranks in the Trainer's own route; a lading loader already gives every "
            "rank its own batch of batch_size: build it with batch_size= the global batch / "
            "the world size, and leave split_batches False"
        )


def loader_batch_size(loader: Resumable) -> int | None:
    """Items a batch of ``loader`` holds on this rank (its state's layout), where it says."""
    size = loader.state_dict()["layout"].get("batch_size")
    return None if size is None else int(size)


def gpus_per_process(args: Any) -> int:
    """The GPUs one process splits a batch over (DataParallel): its DataLoader's batch is
    ``per_device_train_batch_size`` times this (``args.train_batch_size``)."""
    return max(1, int(getattr(args, "n_gpu", 1) or 1))


def check_batch_size(args: Any, loader: Resumable) -> None:
    """Refuse a ``per_device_train_batch_size`` set to another batch size than ``loader``'s (the
    Trainer's own route batches by it; the loader was batched by its caller), and
    ``auto_find_batch_size``, which halves a batch size the loader does not take from it. At
    its default the loader's is taken (:meth:`LadingTrainerMixin.adopt_batch_size`)."""
    has = loader_batch_size(loader)
    default = type(args).__dataclass_fields__["per_device_train_batch_size"].default
    asked, gpus = args.per_device_train_batch_size, gpus_per_process(args)
    if has is not None and asked != default and asked * gpus != has:
        split = f" ({gpus} GPUs of DataParallel x {asked})" if gpus > 1 else ""
        raise ValueError(
            f"TrainingArguments(per_device_train_batch_size={asked}) asks for batches of "
            f"{asked * gpus}{split}, but this lading loader was built with batch_size={has} "
            f"and batches by it: pass batch_size={asked * gpus} to the loader, or "
            f"per_device_train_batch_size={has / gpus:g} (or leave it at its default: the "
            "loader's is taken)"
        )
    if getattr(args, "auto_find_batch_size", False):
        raise ValueError(
            "TrainingArguments(auto_find_batch_size=True) halves the batch size of a "
            "DataLoader the Trainer builds; a lading loader is built by its caller with "
            f"batch_size={has}: leave auto_find_batch_size False and pass a smaller "
            "batch_size to the loader where memory runs out"
        )


def data_seed(args: Any) -> int:
    """The seed the Trainer's own route shuffles its data with: ``data_seed``, else ``seed``."""
    chosen = getattr(args, "data_seed", None)
    return int(args.seed if chosen is None else chosen)


def check_seeds(args: Any, loader: Resumable) -> None:
    """Refuse a ``seed``/``data_seed`` that would shape the Trainer's data differently from the
    ``seed=`` the ``loader`` was built with, where that seed shapes its data: it shuffles, or
    even unshuffled it draws a mixture's windows, packs documents or jitters sequence lengths
    (the field defaults ask for nothing)."""
    state = loader.state_dict()
    fingerprint, layout = state["fingerprint"], state.get("layout", {})
    if "seed" not in fingerprint:
        return
    shapes = [
        what
        for what, does in (
            ("shuffles by it", fingerprint.get("shuffle", True)),
            ("draws its mixture's windows by it", "weights" in fingerprint),
            ("packs its documents by it", fingerprint.get("mode") == "packed"),
            (
                "draws its sequence lengths by it",
                fingerprint.get("mode") == "streams" and layout.get("jitter") is not None,
            ),
        )
        if does
    ]
    if not shapes:
        return  # an unshuffled loader has no order to seed (nor has the Trainer's sequential)
    defaults = type(args).__dataclass_fields__
    chosen = getattr(args, "data_seed", None)
    if chosen is None and args.seed == defaults["seed"].default:
        return
    want, has = data_seed(args), int(fingerprint["seed"])
    if want == has:
        return
    asked = f"data_seed={chosen}" if chosen is not None else f"seed={args.seed} (data_seed unset)"
    keep = "leave data_seed unset" if chosen is not None else f"set data_seed={has}"
    raise ValueError(
        f"TrainingArguments({asked}) orders the Trainer's data, but this lading loader was "
        f"built with seed={has} and {' and '.join(shapes)}: pass seed={want} to "
        "lading.loader(...) "
        f"(or the loader you built), or {keep} to train the loader's order"
    )


def _check_sampling(args: Any, loader: Resumable) -> None:
    """``train_sampling_strategy`` (``group_by_length`` before transformers 5): the loader's
    order is its own seeded one, so only ``"random"`` and, for an unshuffled loader,
    ``"sequential"`` describe it."""
    strategy = getattr(args, "train_sampling_strategy", "random")
    if getattr(args, "group_by_length", False) or strategy in SAMPLING_REFUSED:
        asked = (
            "group_by_length=True"
            if getattr(args, "group_by_length", False)
            else f"train_sampling_strategy={strategy!r}"
        )
        raise ValueError(
            f"TrainingArguments({asked}) is not supported with a lading loader: its order is "
            "a seeded permutation from (seed, epoch), the same on every rank, which grouping "
            "by length would replace; leave the strategy at 'random'"
        )
    shuffles = bool(loader.state_dict()["fingerprint"].get("shuffle", True))
    if strategy == "sequential" and shuffles:
        raise ValueError(
            "TrainingArguments(train_sampling_strategy='sequential') does not reach a lading "
            "loader: pass shuffle=False to lading.loader(...) for the dataset's order"
        )
