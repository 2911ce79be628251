"""Running one node: its config, the round loop, what it checks before it starts, its checkpoints.

    config.py      NodeConfig: TOML + ``--section.key`` flags, strict validation
    trainer.py     TrainingNode: the asyncio round loop (sample, generate, score, learn, checkpoint)
    rollouts.py    a round's task ids, generating and scoring own rollouts, learner samples
    preflight.py   checks before a run starts (model, tasks, disk) and the failed-start notes
    checkpoint.py  atomic safetensors checkpoints with optimizer, RNG and step state
"""
