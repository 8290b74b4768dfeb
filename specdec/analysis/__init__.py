"""Analysis: Part IV-VI's readers of the records (real runs, hardware, oracle, batched cost, the campaign and
its cross-fitting) and ``specdec measure``'s analysis."""
