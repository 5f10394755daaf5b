"""Reads back the scalars of a TensorBoard run directory, in file order (tests only)."""

import glob
import os


def scalars(directory: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} over every event file in `directory`, in the order
    TensorBoard would read them (files by name, events in each file)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                number = (float(tensor_util.make_ndarray(value.tensor))
                          if value.HasField("tensor") else float(value.simple_value))
                out.setdefault(value.tag, []).append((event.step, number))
    return out
