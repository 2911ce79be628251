"""The soak's report: soak.md (the command at its top, the targets met or not, the schedule, the
numbers per process and per phase) and soak.png (memory, descriptors, disk and delivery over the
run, with the kills, the partition, the bootstrap outage and the attack phases marked)."""

from __future__ import annotations

from pathlib import Path

from common.report import markdown_table
from soak_suite.judge import process_series
from soak_suite.maths import counter_increase


def _met(x: bool | None) -> str:
    return "not judged" if x is None else ("met" if x else "**NOT met**")


def markdown(result: dict, stem: str) -> list[str]:
    s = result["schedule"]
    lines = ["# Soak: a swarm left joined under churn and attack", "", "```", result["command"], "```", "",
             f"{result['nodes']} nodes over hivemind on {result['model']} ({result['layout']}), "
             f"{result['minutes']:g} minutes ({result['wall_s'] / 60:.1f} measured), on {result['machine']}; "
             f"sampled every {result['every_s']:g} s; judged after a {s['warm_up_s'] / 60:.1f}-minute warm-up "
             f"(each restarted process after its own).", "",
             "## Targets", ""]
    lines += markdown_table(["target", "measured", "verdict"],
                            [(t["target"], t["measured"], _met(t["met"])) for t in result["targets"]])
    lines += ["", f"![soak]({stem}.png)", "", "## Schedule", "",
              f"- kills (SIGKILL, restart with `--resume` after {result['down_s']:g} s): "
              + ", ".join(f"node{n} at {t / 60:.1f} min" for n, t in s["kills"]),
              f"- partition {s['partition'][2]} from {s['partition'][0] / 60:.1f} to {s['partition'][1] / 60:.1f} min",
              f"- bootstrap peer stopped from {s['outage'][0] / 60:.1f} to {s['outage'][1] / 60:.1f} min",
              "- phases: " + ", ".join(f"{p['name']} {p['start_s'] / 60:.1f}-{p['end_s'] / 60:.1f}"
                                       for p in result["judged"]["delivery"]["phases"])]
    if s["skipped"]:
        lines.append(f"- attack sets not in the adversary registry, skipped: {', '.join(s['skipped'])}")
    via = result.get("found_via") or {}
    if via:
        lines.append("- how each (re)join found the swarm: " + ", ".join(f"{k} {v}" for k, v in sorted(via.items())))
    lines += ["", "## Processes", "",
              "Each node process (a restart is a new one) and the bootstrap peer, over its window after its "
              "warm-up: resident memory at the window's start and end (MB, means of 3 samples), its slope, and "
              "the p2p daemons beside it.", ""]
    rows = []
    for r in result["judged"]["processes"]:
        if not r["samples"]:
            rows.append((r["name"], r["pid"], r["lived_s"], 0, "-", "-", "-", "-", "-", "-"))
            continue
        rows.append((r["name"], r["pid"], r["lived_s"], r["samples"],
                     f"{r['rss_start_mb']} → {r['rss_end_mb']}", _num(r["rss_slope_mb_h"], "+.1f"),
                     f"{r['p2pd_rss_start_mb']} → {r['p2pd_rss_end_mb']}", f"{r['fds_start']} → {r['fds_end']}",
                     f"{r['p2pd_fds_start']} → {r['p2pd_fds_end']}", f"{r['threads_start']} → {r['threads_end']}"))
    lines += markdown_table(["process", "pid", "lived s", "samples judged", "RSS MB", "MB/h", "p2pd RSS MB",
                             "fds", "p2pd fds", "threads"], rows, "lrrrrrrrrr")
    lines += ["", "## Delivery by phase", ""]
    lines += markdown_table(["phase", "minutes", "measured over min", "honest groups / node / min", "vs clean",
                             "adversary sent"],
                            [(p["name"], f"{p['start_s'] / 60:.1f}-{p['end_s'] / 60:.1f}", p["minutes"],
                              _num(p["rate"], ".2f"), _num(p.get("ratio"), ".0%"), p.get("sent", "-"))
                             for p in result["judged"]["delivery"]["phases"]], "lrrrrr")
    lines += ["", "## Kills and resumes", ""]
    lines += markdown_table(["node", "at min", "step at kill", "checkpoint (verified)", "resumed from", "steps redone"],
                            [(f"node{x['node']}", f"{(x['at'] - result['t0']) / 60:.1f}", x["step"], x["checkpoint"],
                              x["resumed_from"], x["redone_steps"]) for x in result["judged"]["resumes"]["resumes"]],
                            "lrrrrr")
    return lines


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def plot(result: dict, samples: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = result["t0"]
    s = result["schedule"]
    fig, axes = plt.subplots(4, 1, figsize=(11, 13), sharex=True)
    colours = {}
    for (name, _pid), rs in sorted(process_series(samples).items(), key=lambda kv: kv[0][0]):
        if name.startswith("adversary"):
            continue
        c = colours.setdefault(name, f"C{len(colours) % 10}")
        x = [(r["t"] - t0) / 60 for r in rs]
        first = name not in [ln.get_label() for ln in axes[0].lines]
        axes[0].plot(x, [r["rss"] / 1e6 for r in rs], color=c, label=name if first else None)
        axes[0].plot(x, [r["p2pd_rss"] / 1e6 for r in rs], color=c, ls="--")
        axes[1].plot(x, [r["fds"] or 0 for r in rs], color=c, label=name if first else None)
        axes[1].plot(x, [r["p2pd_fds"] for r in rs], color=c, ls="--")
    axes[0].set_ylabel("resident MB\n(dashed: p2pd)")
    axes[1].set_ylabel("open fds\n(dashed: p2pd)")
    axes[0].legend(fontsize=7, ncol=4, loc="upper left")
    x = [(q["t"] - t0) / 60 for q in samples]
    kinds = ("checkpoints", "chunks", "logs", "metrics", "other")
    ys = [[sum(d.get(k, 0) for d in q["disk"].values()) / 1e6 for q in samples] for k in kinds]
    axes[2].stackplot(x, *ys, labels=kinds)
    axes[2].set_ylabel("run folder MB\n(all nodes)")
    axes[2].legend(fontsize=7, loc="upper left")
    nodes = sorted({n for q in samples for n in q["nodes"]})
    cum = []
    for k in range(len(samples)):
        cum.append(sum(counter_increase([(q["nodes"].get(n) or {}).get("honest_in") for q in samples[:k + 1]])
                       for n in nodes) / max(1, len(nodes)))
    rate = [(cum[k] - cum[k - 1]) / ((samples[k]["t"] - samples[k - 1]["t"]) / 60) for k in range(1, len(samples))]
    axes[3].plot(x[1:], rate, color="k")
    axes[3].set_ylabel("honest groups\n/ node / min")
    axes[3].set_xlabel("minutes from launch")
    for ax in axes:
        for p in result["judged"]["delivery"]["phases"]:
            if p["attacks"]:
                ax.axvspan(p["start_s"] / 60, p["end_s"] / 60, color="red", alpha=0.08)
        ax.axvspan(s["partition"][0] / 60, s["partition"][1] / 60, color="orange", alpha=0.2)
        ax.axvspan(s["outage"][0] / 60, s["outage"][1] / 60, color="blue", alpha=0.12)
        ax.axvline(s["warm_up_s"] / 60, color="grey", ls=":")
        for n, t in s["kills"]:
            ax.axvline(t / 60, color="black", lw=0.6, ls="--")
    for p in result["judged"]["delivery"]["phases"]:
        if p["attacks"]:
            axes[3].text((p["start_s"] + p["end_s"]) / 120, 0, p["name"], ha="center", va="bottom", fontsize=7,
                         color="red")
    axes[0].set_title("red: attack phases · orange: partition · blue: bootstrap down · dashed: kills · "
                      "dotted: end of warm-up", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
