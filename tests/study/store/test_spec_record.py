import json

import pytest

from hpstudy.study.store.layout import StoreFault
from hpstudy.study.store.spec_record import load_spec_record


@pytest.mark.parametrize("record", [{"spec": {}}, {"n_trials": "8", "spec": {}}, {"n_trials": 8}, [8]])
def test_a_spec_record_without_n_trials_and_spec_is_refused_saying_so(tmp_path, record):
    (tmp_path / "specs").mkdir()
    path = tmp_path / "specs" / "s.json"
    path.write_text(json.dumps(record))
    with pytest.raises(StoreFault) as info:
        load_spec_record(str(tmp_path), "s")
    assert str(info.value) == (
        f"store: cannot read the spec record {path} (not a spec record: no n_trials and spec); "
        "rerun the study (`hpstudy run --config <its spec>`) to rewrite it"
    )
