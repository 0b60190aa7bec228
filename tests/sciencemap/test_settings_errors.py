"""One rule for settings, in a stage's job and in the pipeline: an unknown section or key, a value
of the wrong type or outside its choices, and a key outside any section are each one sentence
(exit code 2) naming the file, the section, the key, what was expected and the allowed values."""
import pytest

from sciencemap.cli import main

CASES = {
    "unknown section": ("[knnn]\nk = 5\n", "unknown section(s) ['knnn']; did you mean 'knn'? the sections are the stages"),
    "unknown key": ("[knn]\nkk = 5\n", "[knn]: unknown setting(s) ['kk'] for KnnConfig; did you mean 'k'? known:"),
    "wrong type": ('[knn]\nk = "thirty"\n', "[knn]: k = 'thirty' is not an integer, which KnnConfig.k must be"),
    "not a choice": ('[knn]\nindex = "hnsw"\n', "[knn]: index = 'hnsw' is not allowed; did you mean 'hnsw_sq8'? "
                                                "the values are ['auto', 'flat', "),
    "outside a section": ("k = 5\n[knn]\n", "k = 5 is outside any [section]; settings go under their stage's [section]"),
}


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err   # one sentence, no traceback
    return err[0]


@pytest.mark.parametrize("kind", list(CASES))
@pytest.mark.parametrize("job", ["knn", "pipeline"])
def test_each_settings_mistake_is_one_sentence_naming_file_section_and_key(tmp_path, capsys, kind, job):
    text, expected = CASES[kind]
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    err = _error(capsys, [job, "--run", str(tmp_path / "run"), "--config", str(cfg)])
    assert f"config file {cfg}" in err and expected in err
    assert not (tmp_path / "run").exists()        # refused before anything is written


def test_a_section_the_job_does_not_read_is_checked_by_the_pipeline(tmp_path, capsys):
    """[place] is a stage's section (jobs/place.py reads it) though not a pipeline stage: the
    pipeline accepts it and checks its keys like any other."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("[place]\nbogus = 1\n")
    err = _error(capsys, ["pipeline", "--run", str(tmp_path / "run"), "--config", str(cfg), "--to", "ingest"])
    assert "[place]: unknown setting(s) ['bogus'] for PlaceConfig" in err


def test_right_values_pass_the_checks():
    from mapping.knn import KnnConfig
    from sciencemap.config import check_settings

    check_settings(KnnConfig, {"k": 5, "index": "flat", "ef_search": 48}, "x")
    with pytest.raises(Exception, match=r"k = 5.0 is not an integer"):
        check_settings(KnnConfig, {"k": 5.0}, "x")
