"""Prompt sources (random access) and the grain iterator over them.

    source = FileSource("prompts.jsonl", template="Q: {question}\\nA:", answer_field="answer")
    source = TaskSource(rl.data.tasks.make("countdown"), split="train", size=100_000)
    it = batches(source, batch_size=8, seed=0)
    batch = next(it)              # list[Example]
    state = it.get_state()        # checkpointable: {"next_index": ...}

A source is `len()` plus `[index] -> Example` (grain's random-access data
source protocol), so shuffling and resuming are exact. `FileSource` reads
JSONL or Parquet and checks every row when it is opened: a malformed row
raises `DataError` naming the file and the row, before any compute.
"""

from __future__ import annotations

import json
import os
import string
from typing import Any

import grain

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
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as e:  # noqa: BLE001 - any pyarrow failure is a bad file
            raise DataError(f"{path}: cannot read Parquet ({e})") from None
        return list(enumerate(table.to_pylist(), start=1))
    raise DataError(f"{path}: unsupported data file type (use .jsonl or .parquet)")


class FileSource:
    """Prompts and answers from a JSONL or Parquet file.

    The prompt is `template.format(**row)` (default: the row's "prompt"
    field); the verifier's reference is the row's `answer_field`. Rows are
    numbered from 1 in errors (JSONL: the line number).
    """

    def __init__(self, path: str, *, template: str = "{prompt}", answer_field: str = "answer",
                 uid_field: str | None = None):
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        needed = fields | {answer_field} | ({uid_field} if uid_field else set())
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
            self.examples.append(Example(prompt=prompt, reference=row[answer_field],
                                         solution="", uid=uid))
        if not self.examples:
            raise DataError(f"{path}: no rows")

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]


def batches(source, batch_size: int, *, seed: int, shuffle: bool = True,
            num_epochs: int | None = None):
    """A grain iterator of `list[Example]` batches; `get_state`/`set_state` resume it.

    Shuffling is a fresh permutation per epoch (grain's index shuffle);
    `num_epochs=None` repeats forever. The last partial batch of a finite
    run is kept.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    dataset = grain.MapDataset.source(source)
    if shuffle:
        dataset = dataset.shuffle(seed=seed)
    dataset = dataset.repeat(num_epochs).batch(batch_size, batch_fn=list)
    return iter(dataset.to_iter_dataset())
