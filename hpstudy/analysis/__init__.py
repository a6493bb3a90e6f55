"""hpstudy analysis: EDFs, gaps, statistics, paper figures and reports from the trial table."""
