"""A store or study that is not there: require_store, require_study and load_study raise one StoreError
line naming the field as the caller's user wrote it (the API's argument, the CLI's flag), the value,
what is stored and the nearest name, for typos, case changes, missing and empty stores."""

import os
import tempfile

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hpstudy.study.store.layout import StoreError, write_trial
from hpstudy.study.store.read import API, CLI, load_study, require_store, require_study, stored_studies
from hpstudy.trainers.errors import shown
from tests.helpers import row

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# a name of letters (what the wrong name is made from) and names that are nothing like it (digits only)
lettered = st.text(LETTERS + LETTERS.upper() + "_", min_size=4, max_size=12).filter(lambda s: s[0] != "_")
unlike = st.lists(st.text("0123456789", min_size=1, max_size=6), max_size=4, unique=True)
MARKS = ["trials", "specs"]  # what makes a folder a store: its trials, or the spec record a run writes first


@st.composite
def misspelt(draw, name: str) -> str:
    """`name` with one typo (a letter dropped, doubled, replaced or two swapped) or its case changed."""
    i = draw(st.integers(1, len(name) - 1))  # the first letter stays (a name starts with a letter)
    letter = draw(st.sampled_from(LETTERS))
    return draw(
        st.sampled_from(
            [
                name[:i] + name[i + 1 :],
                name[:i] + name[i] + name[i:],
                name[:i] + letter + name[i + 1 :],
                name[:i] + name[i + 1 : i + 2] + name[i] + name[i + 2 :],
                name.upper(),
                name.lower(),
                name.swapcase(),
            ]
        )
    )


def _error(call, *args) -> str:
    """The one-line message of the StoreError `call(*args)` raises."""
    with pytest.raises(StoreError) as caught:
        call(*args)
    message = str(caught.value)
    assert "\n" not in message
    return message


@settings(max_examples=60)
@given(data=st.data(), store=lettered, others=unlike, fields=st.sampled_from([API, CLI]), begun=st.sampled_from(MARKS))
def test_a_mistyped_store_names_the_nearest_store_beside_it(data, store, others, fields, begun):
    wrong = data.draw(misspelt(store))
    assume(wrong != store)
    with tempfile.TemporaryDirectory() as parent:
        os.makedirs(f"{parent}/{store}/{begun}")
        for name in others:
            os.makedirs(f"{parent}/{name}/trials")
        os.makedirs(f"{parent}/{store}x")  # a closer folder that is no store is never suggested
        for written in (str, os.path.relpath):  # the nearest is written as the store was
            root = written(f"{parent}/{wrong}")
            for call, args in ((require_store, (root, fields)), (require_study, (root, "s", fields))):
                message = _error(call, *args)
                assert message == (
                    f"{fields.store}: no hpstudy store at {shown(root)} (no trials/ or specs/ folder there); "
                    f"nearest store: {shown(written(f'{parent}/{store}'))}"
                )
            assert _error(load_study, root, "s", fields) == message


@pytest.mark.parametrize("fields", [API, CLI])
@pytest.mark.parametrize("make", ["nothing", "empty folder", "file", "under a file", "unlike stores beside it"])
def test_no_store_and_nothing_near_says_so_alone(make, fields, tmp_path):
    root = str(tmp_path / "results")
    if make == "empty folder":
        os.makedirs(root)
    elif make in ("file", "under a file"):
        open(root, "w").close()
        root = root if make == "file" else f"{root}/x"
    elif make == "unlike stores beside it":
        os.makedirs(tmp_path / "0123/trials")
    message = _error(require_store, root, fields)
    assert message == f"{fields.store}: no hpstudy store at {shown(root)} (no trials/ or specs/ folder there)"


@settings(max_examples=60)
@given(data=st.data(), study=lettered, others=unlike, fields=st.sampled_from([API, CLI]), emptied=st.booleans())
def test_a_mistyped_study_names_the_studies_stored_and_the_nearest(data, study, others, fields, emptied):
    wrong = data.draw(misspelt(study))
    assume(wrong != study)
    with tempfile.TemporaryDirectory() as root:
        for name in [study, *others]:
            write_trial(root, name, row("k"))
        if emptied:  # a study whose rows were deleted (--fresh) leaves its folder: it is not stored
            os.makedirs(f"{root}/trials/study={study}x")
        stored = sorted([study, *others])
        assert stored_studies(root) == stored
        expected = (
            f"{fields.study}: no trials of study {shown(wrong)} in store {shown(root)}; "
            f"studies stored: {shown(stored)}; nearest: {shown(study)}"
        )
        assert _error(require_study, root, wrong, fields) == expected
        assert _error(load_study, root, wrong, fields) == expected
        for name in stored:
            assert require_study(root, name, fields) is None


@pytest.mark.parametrize("mark", MARKS)
def test_a_store_a_run_has_begun_is_a_store_with_no_study_stored(mark, tmp_path):
    (tmp_path / mark).mkdir()
    assert require_store(str(tmp_path)) is None
    assert (
        _error(require_study, str(tmp_path), "s")
        == f"--study: no trials of study 's' in store {shown(str(tmp_path))}; studies stored: none"
    )


@pytest.mark.parametrize("fields", [API, CLI])
@pytest.mark.parametrize("studies", [[], ["0001"], ["0001", "0002"]])
def test_an_unknown_study_with_no_near_name_lists_what_is_stored(studies, fields, tmp_path):
    (tmp_path / "trials").mkdir()
    for name in studies:
        write_trial(str(tmp_path), name, row("k"))
    message = _error(require_study, str(tmp_path), "vit_sweep", fields)
    listed = shown(studies) if studies else "none"
    assert (
        message
        == f"{fields.study}: no trials of study 'vit_sweep' in store {shown(str(tmp_path))}; studies stored: {listed}"
    )


@pytest.mark.parametrize("bad", ["..", "a/b", "", "-x"])
def test_a_name_that_cannot_be_a_study_is_refused_naming_the_field(bad, tmp_path):
    write_trial(str(tmp_path), "s", row("k"))
    for fields in (API, CLI):
        assert _error(require_study, str(tmp_path), bad, fields).startswith(f"{fields.study}: bad value {shown(bad)}")
        assert _error(load_study, str(tmp_path), bad, fields).startswith(f"{fields.study}: bad value {shown(bad)}")


@pytest.mark.parametrize("store,study", [("reslts", "s"), ("results", "S"), ("results", ".."), ("nosuch://x", "s")])
def test_api_messages_name_no_flag_and_cli_messages_the_flag(store, study, tmp_path):
    write_trial(str(tmp_path / "results"), "s", row("k"))
    root = store if "://" in store else str(tmp_path / store)
    api, cli = _error(load_study, root, study, API), _error(load_study, root, study, CLI)
    assert "--" not in api and cli == f"--{api}" and cli == _error(load_study, root, study)


@pytest.mark.parametrize("fields", [API, CLI])
def test_a_study_whose_files_cannot_be_read_is_named_apart_from_a_missing_one(fields, tmp_path):
    root = str(tmp_path)
    write_trial(root, "s", row("k"))
    (tmp_path / "trials/study=s/k.parquet").write_bytes(b"garbage")
    assert stored_studies(root) == ["s"]
    with pytest.warns(UserWarning, match="k.parquet"):
        message = _error(load_study, root, "s", fields)
    assert (
        message
        == f"{fields.study}: no trial of study 's' in store {shown(root)} can be read (the warnings name its files)"
    )
