"""Figures of the multihead chapter."""

FIGURES = ()
