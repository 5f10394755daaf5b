"""Prompt sources (random access) and the grain iterator over them.

    source = FileSource("prompts.jsonl", template="Q: {question}\\nA:", answer_field="answer")
    source = TaskSource(rl.data.tasks.make("countdown"), split="train", size=100_000)
    source = TfdsSource("my_prompts", split="train[:1000]", data_dir="/data/tfds",
                        template="Q: {question}\\nA:", answer_field="answer")
    it = batches(source, batch_size=8, seed=0)
    batch = next(it)              # list[Example]
    state = it.get_state()        # checkpointable: {"next_index": ...}

A source is `len()` plus `[index] -> Example` (grain's random-access data
source protocol), so shuffling and resuming are exact. `FileSource` reads
JSONL or Parquet and checks every row when it is opened: a malformed row
raises `DataError` naming the file and the row, before any compute.
`TfdsSource` reads a prepared TFDS dataset stored as array_record, by
random access and without TensorFlow or the network; the dataset, split,
file format and feature names are checked when it is opened, and a row
with a null or empty answer raises `DataError` when it is read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import string
from typing import Any

import grain
import numpy as np

from models import extras, multihost
from rl.data.tasks import Example, Task


class DataError(ValueError):
    """A missing, unreadable or malformed data file; the message names file and row."""


class TaskSource:
    """The first `size` examples of a procedural task's split."""

    def __init__(self, task: Task, split: str, size: int):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        task.example(0, split)  # validates the split
        self.task, self.split, self.size = task, split, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Example:
        if not 0 <= index < self.size:
            raise IndexError(index)
        return self.task.example(int(index), self.split)


def _read_rows(path: str) -> list[Any]:
    if not os.path.exists(path):
        raise DataError(f"data file {path} does not exist")
    if path.endswith(".jsonl"):
        rows = []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path} row {number}: invalid JSON ({e.msg})") from None
        return rows
    if path.endswith(".parquet"):
        pq = extras.require("pyarrow.parquet", "parquet", "data.source=parquet")

        try:
            table = pq.read_table(path)
        except Exception as e:  # noqa: BLE001 - any pyarrow failure is a bad file
            raise DataError(f"{path}: cannot read Parquet ({e})") from None
        return list(enumerate(table.to_pylist(), start=1))
    raise DataError(f"{path}: unsupported data file type (use .jsonl or .parquet)")


class FileSource:
    """Prompts and answers from a JSONL or Parquet file.

    The prompt is `template.format(**row)` (default: the row's "prompt"
    field); the verifier's reference is the row's `answer_field`;
    `pass_rate_fields` (weak, strong) name two numbers in [0, 1] per row, the
    offline pass rates BOTS interpolates (`Example.pass_rates`). Rows are
    numbered from 1 in errors (JSONL: the line number).
    """

    def __init__(self, path: str, *, template: str = "{prompt}", answer_field: str = "answer",
                 uid_field: str | None = None, pass_rate_fields: tuple[str, str] | None = None):
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        needed = fields | {answer_field} | ({uid_field} if uid_field else set())
        needed |= set(pass_rate_fields or ())
        self.path = path
        self.examples: list[Example] = []
        for number, row in _read_rows(path):
            if not isinstance(row, dict):
                raise DataError(f"{path} row {number}: expected an object, got "
                                f"{type(row).__name__}")
            missing = sorted(needed - set(row))
            if missing:
                raise DataError(f"{path} row {number}: missing field(s) {missing}")
            if row[answer_field] is None:
                raise DataError(f"{path} row {number}: field '{answer_field}' is null")
            prompt = template.format(**{k: row[k] for k in fields})
            uid = str(row[uid_field]) if uid_field else f"{os.path.basename(path)}:{number}"
            rates = None
            if pass_rate_fields:
                rates = tuple(row[f] for f in pass_rate_fields)
                if not all(isinstance(r, (int, float)) and not isinstance(r, bool)
                           and 0.0 <= r <= 1.0 for r in rates):
                    raise DataError(f"{path} row {number}: pass rates {pass_rate_fields} must "
                                    f"be numbers in [0, 1], got {list(rates)}")
            self.examples.append(Example(prompt=prompt, reference=row[answer_field],
                                         solution="", uid=uid, pass_rates=rates))
        if not self.examples:
            raise DataError(f"{path}: no rows")

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]


def _plain(value: Any) -> Any:
    """A TFDS feature value as plain Python: bytes -> str (UTF-8), numpy -> scalars/lists."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _open_tfds(name: str, split: str,
               data_dir: str | os.PathLike | None) -> tuple[Any, int]:
    """The prepared array_record builder of `name` in `data_dir` and the size of `split`."""
    # tfds reads array_record files through this package (a dependency of tfds on Linux only).
    extras.require("array_record", "tfds", "data.source=tfds")
    tfds = extras.require("tensorflow_datasets", "tfds", "data.source=tfds")

    where = data_dir or tfds.core.constants.DATA_DIR
    try:  # try_gcs=False and no download_and_prepare: local files only, no network
        builder = tfds.builder(name, data_dir=data_dir, try_gcs=False)
    except tfds.core.DatasetNotFoundError:
        builder = None
    if builder is None or not builder.is_prepared():
        raise DataError(f"tfds dataset {name!r} not found in data_dir {where}")
    info = builder.info
    stored = sorted(f.value for f in info.available_file_formats())
    if tfds.core.FileFormat.ARRAY_RECORD.value not in stored:
        raise DataError(f"tfds dataset {name!r} in {builder.data_dir} is stored as "
                        f"{', '.join(stored) or 'tfrecord'}, not array_record (prepare it "
                        f"with file_format='array_record')")
    try:
        size = info.splits[split].num_examples
    except (KeyError, ValueError):
        raise DataError(f"tfds dataset {name!r} has no split {split!r} "
                        f"(available: {', '.join(sorted(info.splits))})") from None
    if size == 0:
        raise DataError(f"tfds dataset {name!r} split {split!r}: no rows")
    return builder, size


class TfdsSource:
    """Prompts and answers from a prepared TFDS dataset stored as array_record.

    Opens `tfds.builder(name, data_dir=data_dir, try_gcs=False)` and its
    `as_data_source(split)`: random access, no TensorFlow, and nothing is
    downloaded or prepared (the data must already be in `data_dir`, default
    TFDS_DATA_DIR or ~/tensorflow_datasets). `name` may carry a config and
    version ("name/config:1.0.0") and `split` a slice ("train[:1000]").

    The prompt is `template.format(**features)`, the verifier's reference is
    the `answer_field` feature and the uid the `uid_field` feature (default
    "name/split:index"); bytes are decoded as UTF-8 and numpy values become
    Python scalars and lists. The dataset, split, file format and the
    template/answer/uid feature names are checked when the source is opened;
    rows are read lazily, so a null or empty answer raises `DataError` (naming
    dataset, split and row index, counted from 0) only when that row is read.
    """

    def __init__(self, name: str, *, split: str = "train",
                 data_dir: str | os.PathLike | None = None, template: str = "{prompt}",
                 answer_field: str = "answer",
                 uid_field: str | None = None):
        builder, size = _open_tfds(name, split, data_dir)
        features = builder.info.features
        available = sorted(features.keys()) if hasattr(features, "keys") else []
        # "{meta[lang]}" and "{meta.lang}" need the feature "meta".
        fields = sorted({field.split(".")[0].split("[")[0]
                         for _, field, _, _ in string.Formatter().parse(template) if field})
        for kind, needed in [("template field", fields), ("answer field", [answer_field]),
                             ("uid field", [uid_field] if uid_field else [])]:
            for feature in needed:
                if feature not in available:
                    raise DataError(f"tfds dataset {name!r}: {kind} {feature!r} is not a "
                                    f"feature (available: {', '.join(available)})")
        self.name, self.split, self.size, self.fields = name, split, size, fields
        self.template, self.answer_field, self.uid_field = template, answer_field, uid_field
        self.rows = builder.as_data_source(split, file_format="array_record")

    def __len__(self) -> int:
        return self.size

    def _feature(self, row: dict, field: str, index: int) -> Any:
        try:
            return _plain(row[field])
        except UnicodeDecodeError:
            raise DataError(f"tfds dataset {self.name!r} split {self.split!r} row {index}: "
                            f"feature {field!r} is not UTF-8 text") from None

    def __getitem__(self, index: int) -> Example:
        index = int(index)
        if not 0 <= index < self.size:
            raise IndexError(index)
        row = self.rows[index]
        reference = self._feature(row, self.answer_field, index)
        if reference is None or (isinstance(reference, (str, list, dict)) and not reference):
            raise DataError(f"tfds dataset {self.name!r} split {self.split!r} row {index}: "
                            f"field {self.answer_field!r} is null or empty")
        prompt = self.template.format(**{k: self._feature(row, k, index) for k in self.fields})
        uid = (str(self._feature(row, self.uid_field, index)) if self.uid_field
               else f"{self.name}/{self.split}:{index}")
        return Example(prompt=prompt, reference=reference, solution="", uid=uid)


def batches(source, batch_size: int, *, seed: int, shuffle: bool = True,
            num_epochs: int | None = None, shard=None):
    """A grain iterator of `list[Example]` batches; `get_state`/`set_state` resume it.

    Shuffling is a fresh permutation per epoch (grain's index shuffle);
    `num_epochs=None` repeats forever. The last partial batch of a finite
    run is kept.

    `shard` (a `grain.sharding.ShardOptions`, e.g. `ShardByJaxProcess()`): this
    process reads only its part of each batch, `batch_size / shard_count`
    examples: the shard_index-th contiguous block of the same global batch, so the
    blocks of every process, joined in process order, are the unsharded batch
    (`rl.train.collect` joins them). batch_size must be a multiple of shard_count.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    count = shard.shard_count if shard is not None else 1
    if batch_size % count:
        raise ValueError(f"a batch of {batch_size} does not split over {count} processes: "
                         "use a multiple of the process count")
    dataset = grain.MapDataset.source(source)
    if shuffle:
        dataset = dataset.shuffle(seed=seed)
    finite = num_epochs is not None
    if not finite:  # "forever": grain's infinite length overflows len() in places
        num_epochs = max(1, 2**40 // len(source))
    dataset = dataset.repeat(num_epochs)
    if count > 1:
        if finite and (len(source) * num_epochs) % batch_size:
            raise ValueError("a sharded finite run needs whole batches: the examples "
                             f"({len(source)} × {num_epochs} epochs) are not a multiple of "
                             f"{batch_size}")
        dataset = dataset.batch(batch_size // count, batch_fn=list)[shard.shard_index::count]
    else:
        dataset = dataset.batch(batch_size, batch_fn=list)
    return iter(dataset.to_iter_dataset())


def example_from_json(row: dict) -> Example:
    """An `Example` back from `dataclasses.asdict` after a JSON round trip."""
    rates = row.get("pass_rates")
    return Example(**{**row, "pass_rates": tuple(rates) if rates else None})


class JoinedBatches:
    """The global batches of a per-process `batches(..., shard=...)` iterator: every
    `next` reads this process's block and joins all processes' blocks in process
    order (`models.multihost.allgather_json`), so each process drives the same
    sampling program with the same prompts. Resumable like the iterator it wraps
    (its position is the same in every process)."""

    def __init__(self, local):
        self.local = local

    def __iter__(self):
        return self

    def __next__(self) -> list[Example]:
        mine = [dataclasses.asdict(ex) for ex in next(self.local)]
        return [example_from_json(row) for block in multihost.allgather_json(mine)
                for row in block]

    def get_state(self) -> dict:
        return self.local.get_state()

    def set_state(self, state: dict) -> None:
        self.local.set_state(state)


def process_batches(source, batch_size: int, *, seed: int):
    """`batches` of the whole run: read per process with grain's `ShardByJaxProcess`
    and joined when the run has several processes, plain `batches` otherwise."""
    if multihost.process_count() == 1:
        return batches(source, batch_size, seed=seed)
    return JoinedBatches(batches(source, batch_size, seed=seed,
                                 shard=grain.sharding.ShardByJaxProcess()))
