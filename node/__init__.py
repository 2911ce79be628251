"""The training node: configuration, the round loop, checkpoints, metrics and the CLI.

cli.py         the ``swarm-node`` command (thin; imports torch lazily)
config.py      NodeConfig: TOML + ``--section.key`` flags, strict validation
trainer.py     TrainingNode: the asyncio round loop (sample, generate, score, learn, checkpoint)
rollouts.py    a round's task ids, generating + scoring rollouts, learner samples
checkpoint.py  atomic safetensors checkpoints with optimizer, RNG and step state
metrics.py     metrics.jsonl writer/reader
progress.py    live progress (rich panel or log lines)
plots.py       reward-curve PNG
log_setup.py   text or JSON (structured) logs
errors.py      NodeError, ConfigError, CheckpointError
"""
