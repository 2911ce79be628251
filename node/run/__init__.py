"""Running one node: its config, the round loop, what it checks before it starts, its checkpoints.

    config.py             NodeConfig: TOML + ``--section.key`` flags, strict validation
    config_section.py     the strict base every config section shares
    eval_config.py        the [eval] section: when and how much held-out evaluation runs
    trainer.py            TrainingNode: the asyncio round loop and its step (generate, score, learn)
    startup.py            TrainingNode.create: checks in order, start-up phases, undoing a failed start
    wiring.py             config -> policy, learner (by field name), vLLM engine, identity, exchange
    resume.py             what a node's checkpoint holds; restoring it, and what a restart lost
    behaviour_lag.py      generating with a policy copy some updates old (stale-node experiments)
    summary.py            summary.json and the reward curve at the end of a run
    evaluate.py           held-out evaluation: pass@1 greedy and sampled per family, when a node runs it
    eval_checkpoint.py    ``swarm-node eval``: a saved checkpoint's held-out evaluation, after the fact
    rollouts.py           a round's task ids, generating and scoring own rollouts, learner samples
    own_groups.py         own zero-variance groups left out, replaced by informative peer groups
    signal_watch.py       a run with nothing to learn warned about, with its likely cause; run.log_samples
    preflight.py          checks before a run starts (model, tasks, disk) and the failed-start notes
    checkpoint.py         a run's checkpoint folder: atomic publish, retention, newest valid, resume
    checkpoint_format.py  one checkpoint's files: safetensors + JSON encoding, manifest, verify, read
    file_mode.py          the mode written files get (0666 less the umask; safetensors writes 0600)
"""
