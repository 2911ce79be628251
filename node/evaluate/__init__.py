"""What a run is worth on questions it never trained on, and taking the model away.

    evaluate.py         held-out evaluation: pass@1 greedy and sampled per family, when a node runs it
    eval_checkpoint.py  ``swarm-node eval``: a saved checkpoint's held-out evaluation, after the fact
    export.py           ``swarm-node export``: a checkpoint as a plain Hugging Face folder, with a
                        model card of how it was trained and its held-out scores
"""
