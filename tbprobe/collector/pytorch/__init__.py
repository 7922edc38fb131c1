"""The PyTorch adapter of the collector."""
