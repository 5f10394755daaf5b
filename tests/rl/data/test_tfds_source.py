"""TFDS prompt source: a tiny array_record dataset built here, read without TensorFlow."""

import numpy as np
import pytest

from rl.data import sources

tfds = pytest.importorskip("tensorflow_datasets")

ROWS = {
    "train": [{"question": f"{i}+1", "answer": str(i + 1), "id": 10 + i,
               "meta": {"lang": "en"}} for i in range(5)],
    "test": [{"question": "2*3", "answer": "6", "id": 99, "meta": {"lang": "fr"}}],
    "bad": [{"question": "x", "answer": None, "id": 0, "meta": {"lang": "en"}},
            {"question": "y", "answer": "", "id": 1, "meta": {"lang": "en"}}],
}


class TinyPrompts(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Three splits of text prompts; "answer" may be None (an optional feature)."""

    VERSION = tfds.core.Version("1.0.0")
    # No checksums file next to the code: tfds looks for one through the
    # `importlib_resources` backport (not installed on Python >= 3.9) when a
    # builder lives in a package, as tests do.
    code_path = None

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "question": tfds.features.Text(), "answer": tfds.features.Text(optional=True),
            "id": np.int64, "meta": {"lang": tfds.features.Text()}}))

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(rows) for split, rows in ROWS.items()}

    def _generate_examples(self, rows):
        yield from enumerate(rows)


def build(data_dir, file_format):
    builder = TinyPrompts(data_dir=str(data_dir), file_format=file_format)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return str(data_dir)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return build(tmp_path_factory.mktemp("tfds"), "array_record")


def test_prompts_references_uids_and_bytes_decoding(data_dir):
    src = sources.TfdsSource("tiny_prompts", data_dir=data_dir,
                             template="Q ({meta[lang]}): {question}", uid_field="id")
    assert len(src) == 5
    examples = sorted((src[i] for i in range(len(src))), key=lambda e: int(e.uid))
    assert [e.uid for e in examples] == ["10", "11", "12", "13", "14"]
    assert examples[2] == sources.Example(prompt="Q (en): 2+1", reference="3", solution="",
                                          uid="12")
    assert all(type(e.prompt) is str and type(e.reference) is str for e in examples)
    with pytest.raises(IndexError):
        src[5]


def test_default_uid_and_split_slice(data_dir):
    src = sources.TfdsSource("tiny_prompts:1.0.0", split="test", data_dir=data_dir,
                             template="{question}")
    assert len(src) == 1 and src[0].prompt == "2*3" and src[0].reference == "6"
    assert src[0].uid == "tiny_prompts:1.0.0/test:0"
    assert len(sources.TfdsSource("tiny_prompts", split="train[:2]", data_dir=data_dir,
                                  template="{question}")) == 2


def test_batches_cover_the_split(data_dir):
    src = sources.TfdsSource("tiny_prompts", data_dir=data_dir, template="{question}",
                             uid_field="id")
    batches = list(sources.batches(src, 2, seed=0, num_epochs=1))
    assert [len(b) for b in batches] == [2, 2, 1]
    assert sorted(e.uid for b in batches for e in b) == ["10", "11", "12", "13", "14"]
    ordered = [e for b in sources.batches(src, 5, seed=0, shuffle=False, num_epochs=1)
               for e in b]
    assert ordered == [src[i] for i in range(5)]


def one_line_error(match, **kwargs):
    kwargs = {"name": "tiny_prompts", "template": "{question}", **kwargs}
    with pytest.raises(sources.DataError, match=match) as error:
        sources.TfdsSource(kwargs.pop("name"), **kwargs)
    assert "\n" not in str(error.value)


def test_missing_dataset_names_it_and_the_dir(data_dir, tmp_path):
    one_line_error(f"tfds dataset 'nope' not found in data_dir {data_dir}$",
                   name="nope", data_dir=data_dir)
    one_line_error(f"'tiny_prompts:2.0.0' not found in data_dir {data_dir}$",
                   name="tiny_prompts:2.0.0", data_dir=data_dir)
    one_line_error(f"'tiny_prompts' not found in data_dir {tmp_path}$", data_dir=str(tmp_path))


def test_missing_split_lists_the_available_ones(data_dir):
    one_line_error(r"no split 'validation' \(available: bad, test, train\)",
                   split="validation", data_dir=data_dir)


@pytest.mark.parametrize("kwargs,match", [
    ({"template": "{question} {hint}"},
     r"template field 'hint' is not a feature \(available: answer, id, meta, question\)"),
    ({"answer_field": "label"}, r"answer field 'label' is not a feature \(available: answer, "),
    ({"uid_field": "key"}, r"uid field 'key' is not a feature"),
])
def test_missing_features_are_named_when_opened(data_dir, kwargs, match):
    one_line_error(match, data_dir=data_dir, **kwargs)


def test_other_file_formats_are_refused(tmp_path):
    pytest.importorskip("pyarrow")
    one_line_error(r"tiny_prompts/1\.0\.0 is stored as parquet, not array_record",
                   data_dir=build(tmp_path, "parquet"))


def test_null_or_empty_answer_names_dataset_split_and_row(data_dir):
    src = sources.TfdsSource("tiny_prompts", split="bad", data_dir=data_dir,
                             template="{question}")
    assert len(src) == 2  # opening does not read the rows
    for index in range(2):
        with pytest.raises(sources.DataError, match=f"tfds dataset 'tiny_prompts' split 'bad' "
                                                    f"row {index}: field 'answer' is null or "
                                                    f"empty"):
            src[index]
