"""hpstudy studies: specs, sampling, the Parquet store and the Ray Tune runner."""
