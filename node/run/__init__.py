"""Running one node: the round loop, its start-up and stop, what it checks before it starts.

Its config is node/config/, its checkpoints node/checkpoint/, its held-out evaluation node/evaluate/.

trainer.py            TrainingNode: the asyncio round loop and its step (generate, score, learn)
startup.py            TrainingNode.create: checks in order, start-up phases, undoing a failed start
run_lock.py           one process per run folder (and one bootstrap per key): a flock on RUN/.lock
stopping.py           a stop request the node's waits give way to; closing bounded (``close_within``)
stop_signals.py       Ctrl-C and SIGTERM, each a stop request, from the round loop's start to the close
roles.py              what a node does with the broadcast around its steps (``broadcast.role``: full,
                      learner, worker), and which of its workers' groups a learner admits
role_context.py       what a role may read and call of its node (RoleContext)
wiring.py             config -> learner (by field name), vLLM engine, identity, exchange
step_generation.py    one step's local rollouts: which tasks, which weights sample them, their label
april.py              APRIL partial rollouts, node side: unfinished groups carried into the next step
overlap.py            generation ahead of learning (``train.max_async``): a sampling copy, its schedule
behaviour_lag.py      generating with a policy copy some updates old (stale-node experiments)
summary.py            summary.json and the reward curve at the end of a run
rollouts.py           a round's task ids, generating and scoring own rollouts, learner samples
own_groups.py         own zero-variance groups left out, replaced by informative peer groups
peer_sft.py           which peer rows enter the supervised term: verified and canonical, a kind this
                      node gets all wrong, per-step and per-sender caps (learner.peer_sft_coef)
signal_watch.py       a run with nothing to learn warned about, with its likely cause; run.log_samples
swarm_watch.py        a swarm heard nothing of warned about: no peer of its name, an unheard learner
preflight.py          checks before a run starts (model, tasks, disk) and the failed-start notes
"""
