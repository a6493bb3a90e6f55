"""The Parquet store: a study's rows, its spec record, its lease and its report (docs/store.md).
hpstudy.study.store.store.Store opens one; hpstudy.study.store.layout holds its layout and writes."""
