"""What a node shows while it runs: metrics, status, live progress, plots and logs.

    metrics.py       metrics.jsonl writer and reader
    record_sinks.py  where each step's record goes: metrics.jsonl, and TensorBoard or W&B on request
    status.py        status.json (written atomically each step)
    endpoint.py      the Prometheus metrics endpoint
    progress.py      live progress (rich panel or log lines), start-up included
    plots.py         reward-curve and held-out PNGs
    held_out.py      how a held-out evaluation is shown (latest, headline number, end score, one line)
    paired.py        two arms compared over seeds: paired differences, t 95% confidence intervals
    logs.py          text or JSON (structured) logs
    peer_text.py     a peer's text made safe to show (no control characters, bounded length)

Nothing here imports the rest of ``node``: every layer may report through it.
"""
