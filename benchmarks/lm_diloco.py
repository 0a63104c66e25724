"""P15: why DiLoCo trails all-reduce here, measured side by side at equal tokens, and what Streaming DiLoCo's
fragments and low-precision outer gradients cost.

    python benchmarks/lm_diloco.py [--corpus ../shared/data/tinystories_sample.txt] [--groups warm,perworker,scratch,stream]

Every run: preset `small`, sequence 128, one runtime thread per worker, seed 0, the same batches (each worker takes an
equal shard of every global batch). All-reduce over N workers reproduces one process at the same global batch
bit for bit (benchmarks/results/lm_distributed.json), so the all-reduce references run as one process here and
their traffic is what N workers would send: one fp32 gradient per step.

    base        200 all-reduce steps from scratch (global batch 16): the warm start (`--init-from base`)
    warm        +400 steps from base at global batch 16: all-reduce vs DiLoCo N ∈ {2, 4} × H ∈ {10, 50, 100}
                (a worker's batch is 16 / N)
    perworker   +400 steps from base with each worker keeping batch 16 (global 16·N), as the DiLoCo paper scales:
                all-reduce at 32 and 64 vs DiLoCo N = 2, 4 at H = 50
    scratch     600 steps from scratch at global batch 16: all-reduce vs DiLoCo N ∈ {2, 4} at H = 50
    scratch-h   the same from scratch at H ∈ {10, 100}
    stream      the warm N = 4, H = 50 run with 2 fragments (Streaming DiLoCo), and with bf16 / int8 outer gradients
    outer       the warm N = 4 runs at H = 10 and 50 with other outer optimizers: plain averaging (lr 1, no
                momentum), Nesterov lr 0.5 / momentum 0.5, lr 1.0 / momentum 0.9; and the inner peak lr at 5e-4, 2e-3
    floor       one worker's share alone (batch 4, a quarter of the tokens), and DiLoCo N = 4 averaging every step
                (H = 1, plain averaging: no drift, each worker's AdamW on its own 4 rows)
    long        run length: all-reduce and DiLoCo N = 4, H = 50 for --long-steps (1600) steps from base instead of 400;
                on a lent GPU: --backend eager-cuda --groups long --long-steps 2400 --name lm_diloco_gpu
    sched       the warm start's schedule, the same for both runs of a pair: the warm runs restart AdamW fresh and warm
                up again to the peak lr, which first costs loss (the plot's first points sit above the base's); each
                pair (all-reduce, DiLoCo N = 4 H = 50) at peak lr 5e-4 and 3e-4, and at 1e-3 with a 200-step warmup

`--groups outer --merge` adds groups to an existing results file instead of starting a new one; `--only KEY,...`
(keys as in the JSON, e.g. outer/diloco-4-h50-lr2-m0) runs just those runs of the chosen groups.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import HERE, meta, write_result

SHARED = HERE.parent.parent / "shared" / "data" / "tinystories_sample.txt"
GROUPS = ("warm", "perworker", "scratch", "stream", "outer", "scratch-h", "floor", "long", "sched")


def plan(base: str, long_steps: int = 1600) -> list[tuple[str, str, dict, dict]]:
    """(group, name, LMTrainConfig overrides, DistConfig or None for one process)."""
    warm = dict(steps=400, init_from=base)
    runs = [("warm", "allreduce", dict(warm), {})]
    for n in (2, 4):
        for h in (10, 50, 100):
            runs.append(("warm", f"diloco-{n}-h{h}", dict(warm), dict(workers=n, sync="diloco", inner_steps=h)))
    for n in (2, 4):
        runs.append(("perworker", f"allreduce-b{16 * n}", dict(warm, batch=16 * n), {}))
        runs.append(("perworker", f"diloco-{n}-h50-b{16 * n}", dict(warm, batch=16 * n),
                     dict(workers=n, sync="diloco", inner_steps=50)))
    runs.append(("scratch", "allreduce", dict(steps=600), {}))
    for n in (2, 4):
        runs.append(("scratch", f"diloco-{n}-h50", dict(steps=600), dict(workers=n, sync="diloco", inner_steps=50)))
    for n in (2, 4):
        for h in (10, 100):
            runs.append(("scratch-h", f"diloco-{n}-h{h}", dict(steps=600), dict(workers=n, sync="diloco", inner_steps=h)))
    d4 = dict(workers=4, sync="diloco", inner_steps=50)
    runs.append(("stream", "diloco-4-h50-f2", dict(warm), dict(d4, fragments=2)))
    runs.append(("stream", "diloco-4-h50-bf16", dict(warm), dict(d4, outer_dtype="bf16")))
    runs.append(("stream", "diloco-4-h50-int8", dict(warm), dict(d4, outer_dtype="int8")))
    for h in (10, 50):
        # the last three scale the averaged step up (lr > 1) or halve the momentum: is the lag a too-short outer step?
        for lr, mu in ((1.0, 0.0), (0.5, 0.5), (1.0, 0.9), *(((1.5, 0.0), (2.0, 0.0), (1.0, 0.5)) if h == 50 else ())):
            runs.append(("outer", f"diloco-4-h{h}-lr{lr:g}-m{mu:g}", dict(warm),
                         dict(workers=4, sync="diloco", inner_steps=h, outer_lr=lr, outer_momentum=mu)))
    for lr in (5e-4, 2e-3):  # the inner AdamW's peak lr (all-reduce keeps 1e-3)
        runs.append(("outer", f"diloco-4-h50-inner-lr{lr:g}", dict(warm, lr=lr), d4))
    # what 4 workers buy over one of them alone, and the gap with no drift at all (parameters averaged every step):
    # there the only difference from all-reduce is that each worker's AdamW normalizes its own 4-row gradient
    runs.append(("floor", "one-worker-b4", dict(warm, batch=4), {}))
    runs.append(("floor", "diloco-4-h1-lr1-m0", dict(warm),
                 dict(workers=4, sync="diloco", inner_steps=1, outer_lr=1.0, outer_momentum=0.0)))
    # the warm start's schedule, changed for both runs of a pair (each DiLoCo run is compared with its own pair's)
    for tag, over in (("lr5e-4", dict(lr=5e-4)), ("lr3e-4", dict(lr=3e-4)), ("warmup200", dict(warmup=200))):
        runs.append(("sched", f"allreduce-{tag}", dict(warm, **over), {}))
        runs.append(("sched", f"diloco-4-h50-{tag}", dict(warm, **over), d4))
    # run length: the same warm start, more steps (the schedule stretched with them)
    runs.append(("long", f"allreduce-{long_steps}", dict(warm, steps=long_steps), {}))
    runs.append(("long", f"diloco-4-h50-{long_steps}", dict(warm, steps=long_steps), d4))
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(SHARED) if SHARED.exists() else "demo")
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--backend", default="onnxruntime")
    ap.add_argument("--keep", help="keep the run directories here")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every step count (0.05: a smoke run)")
    ap.add_argument("--merge", action="store_true", help="add the runs to results/lm_diloco.json (its base is reused)")
    ap.add_argument("--only", help="comma-separated run keys (group/name) to run, of the chosen groups")
    ap.add_argument("--long-steps", type=int, default=1600, help="steps of the `long` group's runs (default 1600)")
    ap.add_argument("--name", default="lm_diloco", help="results/NAME.json (default lm_diloco; e.g. lm_diloco_gpu "
                    "for a run with --backend eager-cuda on a lent GPU)")
    ap.add_argument("--recompare", action="store_true", help="recompute every run's gap, reference and the plot "
                    "from results/lm_diloco.json without training (after a change to how runs are compared)")
    a = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if a.recompare:
        import json

        doc = json.loads((HERE / "results" / f"{a.name}.json").read_text())
        _compare(doc["runs"])
        doc["plot"] = _plot(doc["runs"], plt, a.name)
        write_result(a.name, doc)
        return

    from npuport.train.distributed import DistConfig, launch
    from npuport.train.loop import LMTrainConfig, read_metrics, train

    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="npuport-diloco-"))
    root.mkdir(parents=True, exist_ok=True)
    common = dict(corpus=a.corpus, preset=a.preset, runtime=a.backend, batch=16, seq_len=128, eval_every=50,
                  ckpt_every=100)
    groups = a.groups.split(",")
    out = {**meta("lm_diloco.py"), "corpus": a.corpus, "preset": a.preset, "scale": a.scale, "backend": a.backend, "seq_len": 128,
           "base_steps": 200, "runs": {}}

    def one(name: str, over: dict, dist: dict) -> dict:
        run = root / name
        shutil.rmtree(run, ignore_errors=True)
        over = {**over, "steps": max(1, round(over["steps"] * a.scale))}
        if "inner_steps" in dist:
            dist = {**dist, "inner_steps": max(dist.get("fragments", 1), round(dist["inner_steps"] * a.scale))}
            dist["inner_steps"] -= dist["inner_steps"] % dist.get("fragments", 1)
        cfg = LMTrainConfig(**{**common, "eval_every": max(1, round(50 * a.scale)),
                               "warmup": round(50 * min(1.0, a.scale)), **over})
        t0 = time.perf_counter()
        if dist:
            m = launch(cfg, DistConfig(**dist), run)
            sent = m["bytes_sent_per_worker"]
        else:
            m = train(cfg, run, progress=False).manifest
            sent = None
        ms = read_metrics(run)
        param_bytes = 4 * m["n_params"]
        return {"config": {k: v for k, v in over.items() if k != "init_from"}, "distributed": dist or None,
                "warm_start": "init_from" in over, "tokens": cfg.steps * cfg.batch * cfg.seq_len,
                "val_loss": m["val_loss"], "final_loss": m["final_loss"],
                # one process stands for N all-reduce workers: each would send one fp32 gradient per step
                "bytes_sent_per_worker": sent if sent is not None else cfg.steps * param_bytes,
                "wall_s": round(time.perf_counter() - t0, 1),
                "val_curve": [(x["step"], x["val_loss"]) for x in ms if "val_loss" in x]}

    if a.only:
        unknown = set(a.only.split(",")) - {f"{g}/{n}" for g, n, _, _ in plan("", a.long_steps) if g in groups}
        if unknown:
            raise SystemExit(f"--only: no such run in --groups {a.groups}: {', '.join(sorted(unknown))}")
    results = HERE / "results" / f"{a.name}.json"
    if a.merge and results.is_file():
        import json

        out["runs"] = json.loads(results.read_text())["runs"]
    base = one("base", dict(steps=200), {})
    if a.merge and "base" in out["runs"] and abs(out["runs"]["base"]["val_loss"] - base["val_loss"]) > 1e-6:
        raise SystemExit("--merge: this machine's base run differs from the stored one; rerun every group instead")
    out["runs"]["base"] = {**base, "group": "base"}
    print(f"base: val {base['val_loss']:.4f}", flush=True)
    for group, name, over, dist in plan(str(root / "base"), a.long_steps):
        if group not in groups:
            continue
        key = f"{group}/{name}"
        if a.only and key not in a.only.split(","):
            continue
        r = one(key.replace("/", "-"), over, dist)
        out["runs"][key] = {**r, "group": group}
        print(f"{key}: val {r['val_loss']:.4f} · {r['bytes_sent_per_worker'] / 1e6:,.1f} MB/worker · {r['wall_s']:.0f} s",
              flush=True)
        _compare(out["runs"])  # written after every run: one cut short keeps what it measured
        write_result(a.name, out)
    _compare(out["runs"])
    out["plot"] = _plot(out["runs"], plt, a.name)
    write_result(a.name, out)


def _reference(runs: dict, key: str) -> str | None:
    group, name = key.split("/")
    if group == "perworker":
        return f"perworker/allreduce-b{name.rsplit('-b', 1)[1]}" if name.startswith("diloco") else None
    if group == "long":
        return f"long/allreduce-{name.rsplit('-', 1)[1]}" if name.startswith("diloco") else None
    if group == "sched":
        return f"sched/allreduce-{name.rsplit('-h50-', 1)[1]}" if name.startswith("diloco") else None
    ref = "scratch/allreduce" if group.startswith("scratch") else "warm/allreduce"
    return ref if name.startswith("diloco") and ref in runs else None


def _compare(runs: dict) -> None:
    """Each DiLoCo run against the all-reduce run over the same tokens: the val-loss gap and the traffic saved."""
    for key, r in runs.items():
        ref = _reference(runs, key) if "/" in key and key.split("/")[0] != "outer" else None
        if key.startswith("outer/"):
            ref = "warm/allreduce"
        if ref and ref in runs:
            a = runs[ref]
            r["reference"] = ref
            r["val_gap_pct"] = round(100 * (r["val_loss"] - a["val_loss"]) / a["val_loss"], 2)
            r["traffic_reduction"] = round(a["bytes_sent_per_worker"] / max(1, r["bytes_sent_per_worker"]), 1)


def _plot(runs: dict, plt, name: str = "lm_diloco") -> str:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, group, title in ((axes[0], "warm", "warm start, global batch 16"),
                             (axes[1], "perworker", "warm start, batch 16 per worker")):
        for key, r in runs.items():
            if r.get("group") != group:
                continue
            xs, ys = zip(*r["val_curve"]) if r["val_curve"] else ((), ())
            ax.plot(xs, ys, lw=1.6 if "allreduce" in key else 1.0, ls="-" if "allreduce" in key else "--",
                    label=key.split("/")[1])
        ax.set_xlabel("step after the warm start (equal tokens per step within a curve pair)")
        ax.set_ylabel("validation loss (nats/char)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    (HERE / "results").mkdir(exist_ok=True)
    fig.savefig(HERE / "results" / f"{name}.png", dpi=100)
    return f"results/{name}.png"


if __name__ == "__main__":
    main()
