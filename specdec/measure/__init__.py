"""Measurement: the one timer and T(k) loop (:mod:`.core`), the paired-run driver, the roofline, the mode
probe, alpha by teacher forcing, the engine benchmark and the GPU records."""
