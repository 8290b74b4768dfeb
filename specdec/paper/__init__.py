"""The paper and the book: the paper's printed tables, their recomputation, the source article's tables and
claims, the verdict rule, the claims ledger and what the notebooks share."""
