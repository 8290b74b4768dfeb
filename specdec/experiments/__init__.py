"""Run programs: the measurements whose records the book reads.

The campaigns (``campaign``, ``campaign2``), Part IV's real decoding (``realdecoding``), our engine
against transformers (``hfbench``), the batch surface (``batchsurface``), the trees (``trees``) and the
GPU runs (``gpurecord``, ``gpureal``). A program here builds its engines and drafters (the one engine
builder, :mod:`specdec.engine.builder`, and the drafter registry, :mod:`specdec.drafting.registry`),
states its design as a settings dataclass (:class:`specdec.measure.runner.RunSettings`, whose
``to_record()`` is both the record's settings and the resume key), and hands its cells or sections to
the one runner (:mod:`specdec.measure.runner`). The chapters' readers stay in :mod:`specdec.analysis`;
``benchmarks/*.py`` parse arguments into the settings and call the program.
"""
