"""Engine (torch): sessions with croppable KV caches, the lean / C / llama.cpp forwards, model loading,
drafters, the plain and speculative loops, batched decoding, a call's Stats, tiny models.
Imports only :mod:`specdec.theory`."""
