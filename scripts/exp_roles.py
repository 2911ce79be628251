"""A learner and its workers on the embedded default model: separate processes over hivemind.

    python scripts/exp_roles.py --out docs/results            # 1 learner + 3 workers, 300 steps (~9 min)

Starts a ``swarm-node bootstrap`` and, as users run them, ``swarm-node join --role learner`` and
``--workers`` x ``swarm-node join --role worker --follow <learner>`` on loopback, with the default
config (8 prompts x 8 completions a step, J = 4 peer groups) at ``--round-seconds``. The learner
publishes a weight version every step (the 6.8 MB default model: the pipelined broadcast of
docs/broadcast.md); the workers apply them, generate with them and share. Reported from the
nodes' own metrics and status files:

- the learner's correctness, first vs last 20 steps (its own rollouts, and its workers' groups);
- per step: worker groups trained on, their mean version lag, ρ (ESS/B) and the LR factor;
- per worker: versions applied, its lag when generating, bytes it forwarded to the next worker.

Writes ``exp_roles.json``, ``exp_roles.md`` and ``exp_roles.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.curves import plot_mean_curves  # noqa: E402
from common.report import command_line, write_experiment_report  # noqa: E402

LOOPBACK = ["--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]', "--swarm.use_relay", "false",
            "--swarm.nat_port_map", "false"]
W = 20


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("ab") as f:
        return subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                                cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"))


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(args) -> dict:
    from swarm_node.policies.default_model import ensure_default_model
    from swarm_node.protocol.identity import load_or_create_identity

    model = str(ensure_default_model())
    root = args.work
    if root.exists():
        import shutil
        shutil.rmtree(root)
    root.mkdir(parents=True)
    procs: list[subprocess.Popen] = []
    try:
        maddr_file = root / "bootstrap.maddr"
        procs.append(_spawn(["bootstrap", "--host", "127.0.0.1", "--port", "0", "--no-nat", "--no-relay",
                             "--identity", str(root / "bootstrap.key"), "--maddr-file", str(maddr_file)],
                            root / "bootstrap.log"))
        while not maddr_file.exists():
            time.sleep(0.2)
        maddr = maddr_file.read_text().split()[0]
        (root / "learner").mkdir()
        learner_id = load_or_create_identity(root / "learner" / "identity.pem").peer_id
        common = ["--bootstrap", maddr, "--model.name", model, *LOOPBACK, "--train.steps", str(args.steps),
                  "--swarm.round_seconds", str(args.round_seconds), "--train.threads", "1",
                  "--run.checkpoint_every", "0", "--run.progress", "plain", "--run.plot", "false",
                  "--broadcast.max_staleness", str(args.max_staleness)]
        t0 = time.time()
        nodes = {"learner": _spawn(["join", *common, "--role", "learner", "--run.dir", str(root / "learner")],
                                   root / "learner.log")}
        for i in range(args.workers):
            nodes[f"w{i}"] = _spawn(["join", *common, "--role", "worker", "--follow", learner_id,
                                     "--train.seed", str(i + 1), "--run.dir", str(root / f"w{i}")],
                                    root / f"w{i}.log")
        procs += nodes.values()
        for name, p in nodes.items():
            if p.wait(timeout=args.steps * args.round_seconds * 3 + 600) != 0:
                raise SystemExit(f"{name} failed: see {root / (name + '.log')}")
        wall = time.time() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()

    recs = _read(root / "learner" / "metrics.jsonl")
    own = [r["correct"] for r in recs]
    ext = [r["external_correct"] for r in recs if r.get("external_correct") is not None]
    with_workers = [r for r in recs if r.get("worker_groups")]
    workers = []
    for i in range(args.workers):
        st = json.loads((root / f"w{i}" / "status.json").read_text())["broadcast"]
        wrecs = _read(root / f"w{i}" / "metrics.jsonl")
        workers.append({"name": f"w{i}", "steps": len(wrecs), "versions_applied": st["applied_versions"],
                        "last_applied": st["applied_version"],
                        "lag_mean": statistics.mean(r["version_lag"] for r in wrecs),
                        "lag_max": max(r["version_lag"] for r in wrecs), "served_bytes": st["served_bytes"],
                        "bad_chunks": st["bad_chunks"], "fallbacks": st["fallbacks"]})
    lst = json.loads((root / "learner" / "status.json").read_text())["broadcast"]
    return {
        "steps": len(recs), "workers": args.workers, "round_seconds": args.round_seconds, "wall_s": wall,
        "max_staleness": args.max_staleness,
        "learner": {"correct_first": statistics.mean(own[:W]), "correct_last": statistics.mean(own[-W:]),
                    "worker_correct_first": statistics.mean(ext[:W]) if ext else None,
                    "worker_correct_last": statistics.mean(ext[-W:]) if ext else None,
                    "steps_with_worker_groups": len(with_workers),
                    "worker_groups_mean": statistics.mean(r["worker_groups"] for r in recs if "worker_groups" in r),
                    "worker_lag_mean": statistics.mean(r["worker_lag_mean"] for r in with_workers) if with_workers else None,
                    "worker_dropped_stale": recs[-1].get("worker_dropped_stale", 0),
                    "rho_mean": statistics.mean(r["rho"] for r in with_workers) if with_workers else None,
                    "lr_factor_mean": statistics.mean(r["lr_factor"] for r in with_workers) if with_workers else None,
                    "published_version": lst["published_version"], "served_bytes": lst["served_bytes"]},
        "worker_rows": workers, "curve": own,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--round-seconds", type=float, default=1.5)
    ap.add_argument("--max-staleness", type=int, default=2)
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "exp_roles")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    res = run(args)
    L = res["learner"]
    lines = ["# A learner and its workers (the weight broadcast)", "", f"Command: `{command_line()}`", "",
             f"1 learner + {res['workers']} workers, separate `swarm-node join` processes over hivemind on loopback, "
             f"the embedded default model and config, {res['round_seconds']:g} s rounds, a weight version published "
             f"every step, S = {res['max_staleness']}; {res['steps']} steps in {res['wall_s']:.0f} s.", "",
             "| learner | first 20 steps | last 20 steps |", "|---|---:|---:|",
             f"| correctness of its own rollouts | {L['correct_first']:.3f} | {L['correct_last']:.3f} |"]
    if L["worker_correct_first"] is not None:
        lines.append(f"| correctness of its workers' groups | {L['worker_correct_first']:.3f} | "
                     f"{L['worker_correct_last']:.3f} |")
    lines += ["", f"Worker groups per step {L['worker_groups_mean']:.2f} (in {L['steps_with_worker_groups']} of "
                  f"{res['steps']} steps), their mean lag {L['worker_lag_mean']:.2f} versions, "
                  f"{L['worker_dropped_stale']} dropped as too stale; on those steps ρ (ESS/B) "
                  f"{L['rho_mean']:.3f} and the LR factor {L['lr_factor_mean']:.3f} on average. The learner "
                  f"published {L['published_version']} versions and uploaded {L['served_bytes'] / 1e6:.0f} MB.", "",
              "| worker | steps | versions applied | lag when generating (mean / max) | MB forwarded | bad chunks |",
              "|---|---:|---:|---:|---:|---:|"]
    for w in res["worker_rows"]:
        lines.append(f"| {w['name']} | {w['steps']} | {w['versions_applied']} | {w['lag_mean']:.2f} / {w['lag_max']} | "
                     f"{w['served_bytes'] / 1e6:.0f} | {sum(w['bad_chunks'].values())} |")
    plot_mean_curves({"learner": [res["curve"]]}, args.out / "exp_roles.png", "correctness (rolling mean)",
                     "learner with 3 workers")
    write_experiment_report(args.out, "exp_roles", lines, res, "the learner's correctness")


if __name__ == "__main__":
    main()
