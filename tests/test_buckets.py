"""Buckets planned from data: the plan is optimal (against brute force), `npuport plan-buckets` prints it, and
`port --buckets auto` compiles it and records it in the manifest."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from npuport.buckets import plan_buckets
from npuport.cli import main
from npuport.errors import ConfigError


def _cost(lengths, buckets):
    return sum(min(b for b in buckets if b >= n) for n in lengths)


@pytest.mark.parametrize("seed", range(6))
def test_the_plan_is_the_cheapest_set_of_at_most_k(seed):
    rng = random.Random(seed)
    lengths = [rng.choice([rng.randint(3, 40), rng.randint(40, 200)]) for _ in range(rng.randint(5, 60))]
    k = rng.randint(1, 4)
    plan = plan_buckets(lengths, k, limit=256)
    cand = sorted({-(-n // 8) * 8 for n in lengths})
    best = min(_cost(lengths, (*c, cand[-1])) for r in range(k) for c in itertools.combinations(cand[:-1], r))
    assert plan.padded_tokens == best == _cost(lengths, plan.buckets)
    assert len(plan.buckets) <= k and plan.buckets[-1] == cand[-1] and all(b % 8 == 0 for b in plan.buckets)
    assert plan.pad_to_max_tokens == len(lengths) * cand[-1] and plan.real_tokens == sum(lengths)
    assert sum(plan.rows_per_bucket.values()) == len(lengths)


def test_plan_figures_and_limits():
    plan = plan_buckets([10] * 90 + [100] * 10, 2, limit=512)
    assert plan.buckets == (16, 104)
    assert plan.padded_tokens == 90 * 16 + 10 * 104 and plan.saving == pytest.approx(1 - 2480 / 10400)
    assert plan_buckets([10] * 5, 4, limit=512).buckets == (16,)  # ties: fewer buckets, fewer compiles
    over = plan_buckets([600, 20], 2, limit=512)  # longer than the model: held at its positions, counted
    assert over.buckets[-1] == 512 and over.truncated_rows == 1
    for bad in ([], [0, 3]):
        with pytest.raises(ConfigError):
            plan_buckets(bad, 2, limit=512)


def test_plan_buckets_cli(tiny_model_dir, eval_jsonl, tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan-buckets", str(eval_jsonl), "--model", str(tiny_model_dir), "--max", "3", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    plan = json.loads(out.read_text())
    assert 1 <= len(plan["buckets"]) <= 3 and plan["rows"] == 12
    assert f"buckets: {','.join(map(str, plan['buckets']))}" in text and "saved" in text
    assert f"npuport port {tiny_model_dir} -o OUT --buckets" in text  # the hint names a command that exists
    # a runtime that compiles each shape on its own holds the plan to its budget
    assert main(["plan-buckets", str(eval_jsonl), "--model", str(tiny_model_dir), "--max", "8", "--runtime",
                 "ethos-u", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["runtime_budget"] == 3
    assert main(["plan-buckets", str(tmp_path / "missing.jsonl"), "--model", str(tiny_model_dir)]) == 2
    assert main(["plan-buckets", str(eval_jsonl), "--model", str(tmp_path)]) == 2


def test_port_buckets_auto(tiny_model_dir, eval_jsonl, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["port", str(tiny_model_dir), "-o", str(out), "--runtime", "onnxruntime", "--buckets", "auto"]) == 2
    assert "--buckets auto plans the buckets from your rows' token lengths: pass --eval-data" in capsys.readouterr().err
    assert not out.exists()
    assert main(["port", str(tiny_model_dir), "-o", str(out), "--runtime", "onnxruntime", "--buckets", "auto",
                 "--max-buckets", "2", "--eval-data", str(eval_jsonl), "--bench-runs", "1"]) == 0
    report = json.loads((out / "report.json").read_text())
    manifest = json.loads((out / "onnxruntime-fp32" / "manifest.json").read_text())
    plan = manifest["bucket_plan"]
    assert plan == report["bucket_plan"] and plan["asked"] == 2 and len(plan["buckets"]) <= 2
    assert manifest["shape_spec"]["buckets"] == plan["buckets"]
    assert plan["padded_tokens"] <= plan["pad_to_max_tokens"] and 0 <= plan["saving_vs_pad_to_max"] < 1
    assert main(["verify", str(out), "--eval-data", str(eval_jsonl)]) == 0
