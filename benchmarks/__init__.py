"""The benchmarks, run as scripts; a package only so that pytest names ``benchmarks.tests`` apart
from ``tests``."""
