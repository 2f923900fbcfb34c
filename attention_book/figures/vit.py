"""Figures of the vit chapter."""

FIGURES = ()
