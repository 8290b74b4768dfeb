"""Run programs: the measurements whose records the book reads (the campaign, ...).

A program here builds its engines and drafters (the engine and the drafter registry), states its
design as a settings dataclass whose ``to_record()`` is both the record's settings and the resume key,
and hands the cells to the one runner (:func:`specdec.analysis.campaign.run_campaign`). The chapters'
readers stay in :mod:`specdec.analysis`; ``benchmarks/*.py`` are thin commands around these.
"""
