"""Names of the base models the service offers, importable without loading torch."""

QWEN3_TINY = "synth/qwen3-tiny"
QWEN3_LEARNER = "synth/qwen3-learner"
SEEDED_MODEL_NAMES = (QWEN3_TINY, QWEN3_LEARNER)
"""Every seeded model; a model service serves them all."""
DEFAULT_MAX_LOADED = 2
"""Base models a model service holds in memory at once, by default."""
