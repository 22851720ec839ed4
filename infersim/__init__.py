"""infersim: an analytical inference-performance simulator for large language models."""

__version__ = "0.1.0"
