"""Dataset readers and the training data pipeline."""
