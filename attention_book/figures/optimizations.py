"""Figures of the optimizations chapter."""

FIGURES = ()
