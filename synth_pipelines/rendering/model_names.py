"""Names of the base models the service offers, importable without loading torch."""

QWEN3_TINY = "synth/qwen3-tiny"
QWEN3_LEARNER = "synth/qwen3-learner"
DEEPSEEK_TINY = "synth/deepseek-tiny"
KIMI_TINY = "synth/kimi-tiny"
GLM_TINY = "synth/glm-tiny"
FAMILY_TINY_MODELS = {"deepseek": DEEPSEEK_TINY, "kimi": KIMI_TINY, "glm": GLM_TINY}
"""Per model family beside Qwen3, its smallest seeded model (that family's tokenizer)."""
SEEDED_MODEL_NAMES = (QWEN3_TINY, QWEN3_LEARNER, DEEPSEEK_TINY, KIMI_TINY, GLM_TINY)
"""Every seeded model; a model service serves them all."""
DEFAULT_MAX_LOADED = 2
"""Base models a model service holds in memory at once, by default."""
