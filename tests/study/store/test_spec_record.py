import json

import pytest

from hpstudy.study.store.layout import StoreFault
from hpstudy.study.store.spec_record import load_spec_record, report_location


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


@pytest.mark.parametrize("tail", ["", "/", "//"])
def test_a_reports_location_is_the_stores_uri_without_its_query_or_trailing_slashes(tmp_path, tail):
    plain = f"file://{tmp_path}/resultsX"  # a name's last letters are kept, whatever they are
    for uri in (plain + tail, plain + tail + "?unused=1"):
        assert report_location(uri, "s")[3] == f"{plain}/reports/s"
    assert report_location(f"{tmp_path}/resultsX{tail}", "s")[3] == f"{tmp_path}/resultsX/reports/s"
