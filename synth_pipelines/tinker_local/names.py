"""Names of the base models the service offers, importable without loading torch."""

QWEN3_TINY = "synth/qwen3-tiny"
QWEN3_LEARNER = "synth/qwen3-learner"
