from synth_pipelines.cli.main import app

app()
