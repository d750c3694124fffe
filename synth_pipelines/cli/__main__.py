from synth_pipelines.cli.entry import main

main()
