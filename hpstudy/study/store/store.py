"""`Store`: a store opened once (`Store.open(uri)`), with the store's operations as its methods; each
operation is defined in the module of its job and takes an open store or a URI, so code that holds a
`Store` never resolves its URI again (docs/store.md)."""

from typing import ContextManager, Dict, Iterable, List, Optional, Sequence, Tuple

import pandas as pd

from hpstudy.study.store.compaction import compact
from hpstudy.study.store.layout import Location, delete_study, probe_store, write_trial
from hpstudy.study.store.lease import Lease, hold_lease
from hpstudy.study.store.read import (
    CLI,
    Fields,
    load_epochs,
    load_study,
    load_trials,
    require_study,
    stored_keys,
    stored_studies,
)
from hpstudy.study.store.running import Cell, read_running
from hpstudy.study.store.spec_record import load_spec_record, write_spec_record
from hpstudy.trainers.schema import FINISHED


class Store(Location):
    """An open store: its URI, filesystem and base path (Location) and what can be done to it."""

    def probe(self) -> None:
        """StoreFault unless a file can be written here and deleted again (run before any trial)."""
        probe_store(self)

    def write_trial(self, study: str, row: Dict, epoch_rows: Iterable[Dict] = ()) -> str:
        """Store one finished trial (and its epochs); rewriting the same trial_key replaces it."""
        return write_trial(self, study, row, epoch_rows)

    def delete_study(self, study: str) -> None:
        """Delete a study's trial and epoch rows."""
        delete_study(self, study)

    def studies(self) -> List[str]:
        """The studies of which the store holds trial files, sorted."""
        return stored_studies(self)

    def load_trials(self, study: Optional[str] = None, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
        """The stored trials, one row per trial_key per study (read.load_trials)."""
        return load_trials(self, study, columns)

    def load_epochs(self, study: Optional[str] = None) -> pd.DataFrame:
        """The stored epoch rows (read.load_epochs)."""
        return load_epochs(self, study)

    def load_study(self, study: str, fields: Fields = CLI) -> Tuple[pd.DataFrame, pd.DataFrame, Optional[Dict]]:
        """(trials, epochs, spec record) of one study's current spec (read.load_study)."""
        return load_study(self, study, fields)

    def stored_keys(self, study: str, statuses: Sequence[str] = FINISHED) -> set:
        """trial_keys already stored with one of `statuses` (resume skips these)."""
        return stored_keys(self, study, statuses)

    def require_study(self, study: str, fields: Fields = CLI) -> None:
        """StoreError unless the store holds trial files of `study` (read.require_study)."""
        require_study(self, study, fields)

    def compact(self, study: str, held: Optional[Lease] = None) -> Dict[str, Dict[str, int]]:
        """Merge the study's files stored since the last compaction (compaction.compact)."""
        return compact(self, study, held)

    def write_spec_record(
        self, study: str, spec_source: Dict, n_trials: int, trial_keys: Optional[Iterable[str]] = None
    ) -> None:
        """Keep the spec that produced a study beside its rows (spec_record.write_spec_record)."""
        write_spec_record(self, study, spec_source, n_trials, trial_keys)

    def spec_record(self, study: str) -> Optional[Dict]:
        """The study's spec record, or None (spec_record.load_spec_record)."""
        return load_spec_record(self, study)

    def lease(self, study: str, command: str, wait: bool = False, how: str = "--wait") -> ContextManager[Lease]:
        """The study's lease, held for a `with` block (lease.hold_lease)."""
        return hold_lease(self, study, command, wait, how)

    def running(self, study: str, host: str, pid: int) -> Dict[Cell, int]:
        """The trials per cell that the live driver `host`/`pid` runs now (running.read_running)."""
        return read_running(self, study, host, pid)
