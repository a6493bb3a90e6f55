"""The metrics every number can be built on: their names, stored columns and meaning (no pandas: the
command line's help reads them)."""

METRIC_COLUMNS = {"final": "top1_err", "best": "best_top1_err", "ema_best": "best_ema_top1_err"}
METRICS = (*METRIC_COLUMNS, "paper")
DEFAULT_METRIC = "paper"
METRIC_DOCS = {
    "final": "top-1 error after the last epoch, raw weights",
    "best": "lowest top-1 error over epochs, raw weights",
    "ema_best": "lowest top-1 error over epochs, EMA weights (trials without EMA left out)",
    "paper": "ema_best where EMA was on, else best (pycls's test_ema_epoch.min_top1_err)",
}
