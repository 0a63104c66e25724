"""Demo data generator: deterministic, persona-disjoint splits, varied, not separable by a keyword."""

from npuport.detector.generate import build_dataset, keyword_baseline, split_personas, write_dataset
from npuport.detector.personas import PERSONAS


def test_deterministic_and_seed_sensitive():
    a, b = build_dataset(seed=3, per_persona=6, procedural=20), build_dataset(seed=3, per_persona=6, procedural=20)
    assert a == b
    c = build_dataset(seed=4, per_persona=6, procedural=20)
    assert a["train"] != c["train"]


def test_splits_are_persona_disjoint():
    for seed in (0, 1, 7):
        data = build_dataset(seed=seed, per_persona=6, procedural=20)
        cards = {k: {r["persona"] for r in rows} for k, rows in data.items()}
        assert not (cards["train"] & cards["val"]) and not (cards["train"] & cards["test"]) and not (cards["val"] & cards["test"])
        splits = split_personas(seed)
        assert sum(len(v) for v in splits.values()) == len(PERSONAS)
        for k in ("val", "test"):
            assert {r["persona"] for r in data[k]} == {p.card for p in splits[k]}  # own cards only


def test_variety():
    assert len({p.card for p in PERSONAS}) >= 40
    assert {p.lang for p in PERSONAS} >= {"en", "ja", "ko"}
    data = build_dataset(seed=0, per_persona=40, procedural=100)
    rows = data["train"] + data["val"] + data["test"]
    kinds = {r["kind"] for r in rows}
    for k in ("dev_generic", "dev_refusal", "dev_disclose", "dev_fourth", "dev_leak", "dev_helpful", "dev_support",
              "dev_partial", "dev_english", "ic_chat", "ic_refuse", "ic_deflect", "ic_human", "ic_machine", "ic_tech",
              "ic_help_voice"):
        assert k in kinds, k
    users = {r["user_kind"] for r in rows}
    assert users >= {"chat", "code", "taxes", "medical", "out_of_world", "are_you_ai", "jailbreak", "extract", "advice",
                     "creative"}


def test_held_out_template_family_is_unseen_in_training():
    """P10: `test_family` is written only with templates no training or validation row used."""
    data = build_dataset(seed=0, per_persona=40, procedural=200)
    fam, seen = data["test_family"], data["train"] + data["val"]
    assert {r["persona"] for r in fam} == {r["persona"] for r in data["test"]}
    fixed = ("dev_refusal", "dev_disclose", "dev_support", "dev_fourth")  # whole replies drawn from one bank
    assert not ({r["reply"] for r in fam if r["kind"] in fixed} & {r["reply"] for r in seen if r["kind"] in fixed})
    assert sum(r["label"] for r in fam) == len(fam) // 2


def test_not_separable_by_keyword():
    data = build_dataset(seed=0, per_persona=40, procedural=100)
    rows = data["test"] + data["train"]
    has_kw = lambda r: "sorry" in r["reply"].lower() or "AI" in r["reply"]  # noqa: E731
    assert any(has_kw(r) for r in rows if r["label"] == 0), "in-persona replies must mention AI/sorry sometimes"
    assert sum(not has_kw(r) for r in rows if r["label"] == 1) > 0.5 * sum(r["label"] for r in rows)
    assert keyword_baseline(data["test"]) < 0.75


def test_write_dataset_stats(tmp_path):
    stats = write_dataset(tmp_path, seed=0, per_persona=4, procedural=10)
    for k in ("train", "val", "test", "test_family"):
        assert (tmp_path / f"{k}.jsonl").is_file()
        assert stats["splits"][k]["rows"] > 0
    assert abs(stats["splits"]["test"]["deviation_fraction"] - 0.5) < 1e-9


def test_polite_in_character_japanese_and_korean():
    """In-character replies in polite and formal registers exist in training (a polite reply with in-world content is
    not assistant voice), and Korean particles agree with the nouns the templates are filled with."""
    import re

    from npuport.detector.generate import build_dataset
    from npuport.detector.personas import _josa_slots, procedural_personas_cjk

    train = build_dataset(seed=0, per_persona=4, procedural=400)["train"]
    polite_ko = [r for r in train if r["label"] == 0 and re.search(r"[가-힣](습니다|어요|아요|세요|예요)", r["reply"])]
    polite_ja = [r for r in train if r["label"] == 0 and re.search(r"(ございます|いたします|ませ|ください)", r["reply"])]
    assert len(polite_ko) >= 20 and len(polite_ja) >= 20
    assert _josa_slots("{0}을 아낍니다. {1}와 {2}는", ["망치", "검", "배터리"]) == "망치를 아낍니다. 검과 배터리는"
    for p in procedural_personas_cjk(40, 3):
        if p.lang == "ko":
            for text in (p.card, *p.lines):
                for noun, particle in re.findall(r"([가-힣])(을|를)(?=\s)", text):
                    assert (particle == "을") == ((ord(noun) - 0xAC00) % 28 != 0), text


def test_every_split_has_english_japanese_and_korean_characters():
    for seed in (0, 1, 7):
        data = build_dataset(seed=seed, per_persona=6, procedural=20)
        for name in ("train", "val", "test", "test_family"):
            assert {r["lang"] for r in data[name]} == {"en", "ja", "ko"}, (seed, name)


def test_composed_in_character_refusals_keep_the_held_out_family_out_of_training():
    """Composed ja/ko refusals draw every part from the allowed template families: a part of the held-out family
    never reaches a training row, and test_family rows use it."""
    import dataclasses
    import random

    from npuport.detector.generate import TRAIN_FAMILIES, _composed_refusal
    from npuport.detector.personas import P
    from npuport.detector.templates import FAMILIES, HELD_OUT, REFUSAL_PARTS

    for lang, parts in REFUSAL_PARTS.items():
        plain = P("x", "card", "ADDR", ["I!"], ["L1", "L2"], "AUTH", lang=lang)
        # a composed character refuses and offers its own things too (the *_noun parts, with both nouns the same
        # here so that the filled text is known)
        for p in (plain, dataclasses.replace(plain, nouns=("N", "N"))):
            fill = dict(a="ADDR", auth="AUTH", l="L1", l2="L2", n0="N", n1="N")
            held = [t.format(**fill) for k in ("apology", "reason", "refused", "refused_noun")
                    for i, t in enumerate(parts[k]) if FAMILIES[i % len(FAMILIES)] == HELD_OUT]
            rng = random.Random(0)
            train = [_composed_refusal(p, rng, TRAIN_FAMILIES, "L1", "L2", "I!") for _ in range(300)]
            family = [_composed_refusal(p, rng, (HELD_OUT,), "L1", "L2", "I!") for _ in range(50)]
            assert not any(h in t for h in held for t in train), lang
            assert all(any(h in t for h in held) for t in family), lang
            if p.nouns:
                assert any("N" in t for t in train), lang


def test_korean_sentences_are_spaced_in_both_labels():
    """Korean writes a space after a sentence; deviations were once joined without it while in-persona replies had
    it, so the spacing alone gave the label away."""
    import re

    rows = [r for r in build_dataset(seed=0, per_persona=8, procedural=200)["train"] if r["lang"] == "ko"]
    for label in (0, 1):
        glued = [r["reply"] for r in rows if r["label"] == label and re.search(r"[.!?][가-힣]", r["reply"])]
        assert not glued, glued[:3]


def test_in_world_questions_are_answered_both_ways_in_every_language():
    """An in-world question (a price, a distance, an hour) is answered in voice with the world's facts (in persona)
    or by the assistant (a deviation), in every language: a terse factual answer alone must not give the label."""
    data = build_dataset(seed=0)
    for lang in ("en", "ja", "ko"):
        rows = [r for r in data["train"] if r["user_kind"] == "in_world" and r["lang"] == lang]
        assert {r["label"] for r in rows} == {0, 1}, lang
        info = [r for r in rows if r["kind"] == "ic_info"]
        assert len(info) >= 10 and any(ch.isdigit() for r in info for ch in r["reply"]), lang
        # the held-out template family (test_family) answers in-world questions in voice too
        fam = {r["reply"] for r in data["test_family"] if r["kind"] == "ic_info" and r["lang"] == lang}
        assert fam, lang
