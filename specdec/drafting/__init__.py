"""Tree drafters: drafters that propose a :class:`~specdec.theory.trees.DraftTree` instead of a chain.

* :mod:`specdec.drafting.lookuptree` -- prompt lookup merging every earlier match into a trie.
* :mod:`specdec.drafting.suffix`     -- suffix decoding (SuffixDecoding, arctic-inference's semantics).
* :mod:`specdec.drafting.modeltree`  -- a model drafter's chain with side leaves.
* :mod:`specdec.drafting.registry`   -- the drafter registry: one spec string -> one drafter, chain or tree.

The layer sits between ``engine`` and ``train``: it may import ``theory`` and ``engine``.
"""
