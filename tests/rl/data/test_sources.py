"""Prompt sources: JSONL/Parquet rows, errors naming file and row, resumable batches."""

import json

import pytest

from rl.data import sources, tasks


def write_jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_jsonl_template_answer_and_uid(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"question": "1+1", "answer": "2", "id": "a"}, "", {"question": "2*3", "answer": 6,
                                                           "id": "b"}])
    src = sources.FileSource(path, template="Q: {question}\nA:", uid_field="id")
    assert len(src) == 2
    assert src[0].prompt == "Q: 1+1\nA:" and src[0].reference == "2" and src[0].uid == "a"
    assert src[1].reference == 6


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"prompt": ["x", "y"], "answer": [1, 2]}), path)
    src = sources.FileSource(path)
    assert [e.prompt for e in src.examples] == ["x", "y"]
    assert [e.uid for e in src.examples] == ["d.parquet:1", "d.parquet:2"]


@pytest.mark.parametrize("rows,match", [
    (['{"prompt": "a", "answer": 1}', '{"prompt": "b", "answer": '], r"d\.jsonl row 2: invalid JSON"),
    ([{"prompt": "a", "answer": 1}, {"prompt": "b"}], r"d\.jsonl row 2: missing field\(s\) \['answer'\]"),
    ([{"prompt": "a", "answer": None}], r"row 1: field 'answer' is null"),
    (["[1, 2]"], r"row 1: expected an object, got list"),
    ([""], r"d\.jsonl: no rows"),
])
def test_malformed_rows_name_file_and_row(tmp_path, rows, match):
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(sources.DataError, match=match):
        sources.FileSource(path)


def test_missing_and_unsupported_files(tmp_path):
    with pytest.raises(sources.DataError, match="does not exist"):
        sources.FileSource(str(tmp_path / "nope.jsonl"))
    (tmp_path / "d.csv").write_text("a,b\n")
    with pytest.raises(sources.DataError, match="unsupported data file type"):
        sources.FileSource(str(tmp_path / "d.csv"))


def test_batches_resume_exactly_from_state():
    src = sources.TaskSource(tasks.make("arithmetic"), "train", size=50)
    it = sources.batches(src, 4, seed=3)
    for _ in range(7):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(20)]  # crosses an epoch boundary
    resumed = sources.batches(src, 4, seed=3)
    resumed.set_state(state)
    assert [next(resumed) for _ in range(20)] == expected
    assert all(len(b) == 4 for b in expected)


def test_epochs_cover_the_source_and_reshuffle():
    src = sources.TaskSource(tasks.make("countdown"), "heldout", size=12)
    batches = list(sources.batches(src, 5, seed=0, num_epochs=2))
    assert [len(b) for b in batches] == [5, 5, 5, 5, 4]
    flat = [e.uid for b in batches for e in b]
    first, second = flat[:12], flat[12:]
    assert sorted(first) == sorted(second) == sorted(src[i].uid for i in range(12))
    assert first != second
    ordered = [e.uid for b in sources.batches(src, 12, seed=0, shuffle=False, num_epochs=1)
               for e in b]
    assert ordered == [src[i].uid for i in range(12)]
