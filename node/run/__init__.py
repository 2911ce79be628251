"""Running one node: its config, the round loop, what it checks before it starts, its checkpoints.

config.py             NodeConfig: TOML + ``--section.key`` flags, strict validation
config_section.py     the strict base every config section shares
tasks_config.py       the [tasks] section: the families a node samples (built-in, task sources), levels
eval_config.py        the [eval] section: when and how much held-out evaluation runs
learner_config.py     the [learner] section: optimizer, loss, off-policy correction, LR rule
model_defaults.py     what a node picks for a real model on a CPU where the user set nothing: LoRA,
                      bfloat16, greedy-only evaluation
resume_config.py      a resumed run's config: its saved config.json, this start's file and flags on top
trainer.py            TrainingNode: the asyncio round loop and its step (generate, score, learn)
startup.py            TrainingNode.create: checks in order, start-up phases, undoing a failed start
run_lock.py           one process per run folder (and one bootstrap per key): a flock on RUN/.lock
stopping.py           a stop request the node's waits give way to; closing bounded (``close_within``)
stop_signals.py       Ctrl-C and SIGTERM, each a stop request, from the round loop's start to the close
wiring.py             config -> policy, learner (by field name), vLLM engine, identity, exchange
step_generation.py    one step's local rollouts: which tasks, which weights sample them, their label
april.py              APRIL partial rollouts, node side: unfinished groups carried into the next step
overlap.py            generation ahead of learning (``train.max_async``): a sampling copy, its schedule
resume.py             what a node's checkpoint holds; restoring it, and what a restart lost
behaviour_lag.py      generating with a policy copy some updates old (stale-node experiments)
summary.py            summary.json and the reward curve at the end of a run
evaluate.py           held-out evaluation: pass@1 greedy and sampled per family, when a node runs it
eval_checkpoint.py    ``swarm-node eval``: a saved checkpoint's held-out evaluation, after the fact
export.py             ``swarm-node export``: a checkpoint as a plain Hugging Face folder, model card
rollouts.py           a round's task ids, generating and scoring own rollouts, learner samples
own_groups.py         own zero-variance groups left out, replaced by informative peer groups
peer_sft.py           which peer rows enter the supervised term: verified, a kind this node gets all
                      wrong, per-step and per-sender caps (learner.peer_sft_coef)
signal_watch.py       a run with nothing to learn warned about, with its likely cause; run.log_samples
swarm_watch.py        a swarm heard nothing of warned about: no peer of its name, an unheard learner
preflight.py          checks before a run starts (model, tasks, disk) and the failed-start notes
checkup.py            ``swarm-node doctor``'s verdicts: a line per check, the exit code, the judgements
checkpoint.py         a run's checkpoint folder: atomic publish, retention, newest valid, resume
checkpoint_format.py  one checkpoint's files: safetensors + JSON encoding, manifest, verify, read
file_mode.py          the mode written files get (0666 less the umask; safetensors writes 0600)
"""
