"""What a node is told: its config, read from TOML and ``--section.key`` flags and strictly
checked, and the policy that config names.

    config.py          NodeConfig: TOML + ``--section.key`` flags, strict validation
    config_section.py  the strict base every config section shares
    tasks_config.py    the [tasks] section: the families a node samples (built-in, task sources), levels
    eval_config.py     the [eval] section: when and how much held-out evaluation runs
    learner_config.py  the [learner] section: optimizer, loss, off-policy correction, LR rule
    model_defaults.py  what a node picks for a real model on a CPU where the user set nothing: LoRA,
                       bfloat16, greedy-only evaluation
    resume_config.py   a resumed run's config: its saved config.json, this start's file and flags on top
    policy_loader.py   the policy a config names: resolved, loaded, prompted in its format
"""
