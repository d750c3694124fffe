"""A local Tinker-compatible model service: the embedded default for sampling and training.

The unmodified `tinker` SDK (and tinker-cookbook on top of it) runs against this
server with only `TINKER_BASE_URL` and a `tml-...` API key set. Start it with
`synth model serve`, or in-process with `create_app()` under uvicorn.
"""
