"""The Attention Book's package: every component the book teaches, one module per concept."""

__version__ = "0.1.0"
