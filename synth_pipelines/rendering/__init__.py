"""Rendering Anthropic Messages calls in each model family's native format, and back.

Shared by the proxy, learning and the runtime, and importing none of them: the family
adapters, the prefix and segment caches they render through, and the model registry that
says which adapter and route each served model uses.
"""
