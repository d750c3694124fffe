"""synth-pipelines: run, evaluate and train tool-using coding agents."""
