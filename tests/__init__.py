"""The tests, a folder per layer of the package (docs/architecture.md); helpers in ``support``."""
