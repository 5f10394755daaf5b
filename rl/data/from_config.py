"""What a config's `data` section describes: the train and held-out prompt sources and
the task selector over the train pool."""

from __future__ import annotations

from typing import Any

import numpy as np

from rl.data import selectors
from rl.data import sources as sources_lib
from rl.data import tasks as tasks_lib
from rl.registry import set_options

DATA_SOURCES = ("task", "jsonl", "parquet", "tfds")


def make_sources(data) -> tuple[Any, Any | None, str]:
    """(train source, held-out source or None, the task's verifier or "")."""
    if data.source not in DATA_SOURCES:
        raise ValueError(f"unknown data.source {data.source!r} (choose from "
                         f"{', '.join(DATA_SOURCES)})")
    fields = {"template": data.template, "answer_field": data.answer_field,
              "uid_field": data.uid_field or None}
    if data.pass_rate_fields and data.source not in ("jsonl", "parquet"):
        raise ValueError(f"data.pass_rate_fields is set but data.source is {data.source}: "
                         "offline pass rates are read from jsonl/parquet rows")
    if data.source == "task":
        task = tasks_lib.make(data.task.name, **set_options(data.task))
        return (sources_lib.TaskSource(task, "train", data.train_size),
                sources_lib.TaskSource(task, "heldout", data.heldout_size), task.reward)
    if data.source == "tfds":
        if not data.tfds_name:
            raise ValueError("data.source is tfds but data.tfds_name is empty")
        opts = dict(data_dir=data.tfds_data_dir or None, **fields)
        train = sources_lib.TfdsSource(data.tfds_name, split=data.tfds_split, **opts)
        heldout = (sources_lib.TfdsSource(data.tfds_name, split=data.tfds_heldout_split, **opts)
                   if data.tfds_heldout_split else None)
        return train, heldout, ""
    if not data.path:
        raise ValueError(f"data.source is {data.source} but data.path is empty")
    for path in filter(None, (data.path, data.heldout_path)):
        if not path.endswith(f".{data.source}"):
            raise ValueError(f"data.source is {data.source} but {path} is not a "
                             f".{data.source} file")
    rates = tuple(f.strip() for f in data.pass_rate_fields.split(",")) \
        if data.pass_rate_fields else None
    if rates is not None and (len(rates) != 2 or not all(rates)):
        raise ValueError(f"data.pass_rate_fields must name two fields 'weak,strong', got "
                         f"{data.pass_rate_fields!r}")
    train = sources_lib.FileSource(data.path, **fields, pass_rate_fields=rates)
    heldout = sources_lib.FileSource(data.heldout_path, **fields) if data.heldout_path else None
    return train, heldout, ""


def make_selector(data, source, n: int) -> selectors.Uniform:
    """The task selector `data.selector` names over the train pool `source` (`n` rollouts
    per prompt), with the rows' offline pass rates (`data.pass_rate_fields`) for BOTS."""
    section = data.selector
    offline = None
    if section.name == "bots" and data.pass_rate_fields:
        offline = np.array([source[i].pass_rates for i in range(len(source))], np.float64)
    return selectors.make(section.name, num_tasks=len(source), n=n, offline=offline,
                          **set_options(section))
