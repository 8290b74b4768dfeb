"""Run programs: the measurements and training runs whose records and drafts the book reads.

Each program is one frozen options dataclass (:class:`specdec.experiments.options.Program`) whose
``run()`` makes its record; :data:`specdec.experiments.programs.PROGRAMS` names them all, and
``specdec run NAME [--field value ...]`` runs one, its options generated from the dataclass
(``specdec run --list``). A program builds its engines and drafters (the one engine builder,
:mod:`specdec.engine.builder`, and the drafter registry, :mod:`specdec.drafting.registry`), states the
design its record stores as a settings dataclass (:class:`specdec.measure.runner.RunSettings`, whose
``to_record()`` is both the record's settings and the resume key), and hands its cells or sections to
the one runner (:mod:`specdec.measure.runner`). The chapters' readers stay in :mod:`specdec.analysis`.
"""
