"""Theory (numpy only, no torch): the closed forms of Leviathan et al. (2023) (:mod:`.speedup`), the i.i.d.
model, Algorithm 1 on probability rows, draft-length policies, intervals, the one argument checker
and token comparisons."""

#: The package's version (pyproject.toml's), here in the lowest layer so that the records of every
#: layer can state it without importing the package root (which sits above every layer).
__version__ = "0.1.0"
