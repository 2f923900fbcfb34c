"""Figures of the self_attention chapter."""

FIGURES = ()
