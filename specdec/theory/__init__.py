"""Theory (numpy only, no torch): the closed forms of Leviathan et al. (2023) (:mod:`.speedup`), the i.i.d.
model, Algorithm 1 on probability rows, draft-length policies, intervals, the one argument checker
and token comparisons."""
