"""hpstudy trainers: model zoo, datasets, optimizers and the one-trial training loop."""
