"""Figures of the transformer chapter."""

FIGURES = ()
