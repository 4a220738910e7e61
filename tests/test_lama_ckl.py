"""The LAMA-ckl benchmark: scoring by hand, a deterministic split, the protocol end to end on the tiny model,
and a smoke run on the real model and the real data."""
import json

import pytest
import torch

from bench.lama_ckl import cli, report, rho1, run
from core.probes import lama_probe
from core.scoring import Probe, score_probes
from research import lama_ckl


def row(uuid: str, sentence: str, obj: str, evidence: str) -> dict:
    return {"uuid": uuid, "task_descriptive": sentence, "object": obj, "evidence": evidence}


def test_lama_probe_uses_the_last_occurrence_of_the_object():
    probe = lama_probe(row("1", "paris is a city in france and paris is the capital of france .", "france", ""))
    assert probe == Probe("paris is a city in france and paris is the capital of", "france")
    assert lama_probe(row("2", "the object is missing .", "rome", "")) is None


def test_multi_token_object_scores_the_share_of_tokens_right(tiny):
    """Build a two-token object whose first token the model predicts and whose second it does not."""
    tok, prompt = tiny.tokenizer, "the capital of veltoria is"

    def next_word(text: str) -> str:
        with torch.no_grad():
            logits = tiny.model(torch.tensor([tok(text)["input_ids"]])).logits[0, -1]
        return tok.convert_ids_to_tokens(int(logits.argmax()))

    first = next_word(prompt)
    second_predicted = next_word(f"{prompt} {first}")
    second = next(w for w in ("rome", "paris") if w != second_predicted)
    wrong_first = next(w for w in ("rome", "paris") if w != first)
    probes = [Probe(prompt, f"{first} {second}"), Probe(prompt, f"{first} {second_predicted}"),
              Probe(prompt, f"{wrong_first} {second_predicted}")]
    assert score_probes(tiny.model, tok, probes) == [0.5, 1.0, 0.5 if next_word(f"{prompt} {wrong_first}")
                                                     == second_predicted else 0.0]


def test_scores_do_not_depend_on_batch_padding(tiny):
    probes = [Probe("the", "capital"), Probe("the capital of france is a city in", "germany italy"), Probe("a", "b c")]
    assert score_probes(tiny.model, tiny.tokenizer, probes, batch_size=3) == \
        [score_probes(tiny.model, tiny.tokenizer, [p], batch_size=1)[0] for p in probes]


def test_rho1_keeps_the_tokens_with_the_largest_excess_loss():
    current = [0.0, 5.0, 1.0, 4.0, 2.0, 3.0]
    reference = [0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    assert rho1.excess_loss_top(current, reference, 0.6) == [0, 1, 0, 1, 0, 1]


def test_rho1_token_nll_does_not_depend_on_batch_padding(tiny):
    sequences = [tiny.tokenizer(t)["input_ids"] for t in ("the capital of france is paris .", "rome", "a city")]
    batched = rho1.token_nll(tiny.model, sequences, tiny.tokenizer.pad_token_id or 0, batch_size=3)
    alone = [rho1.token_nll(tiny.model, [s], tiny.tokenizer.pad_token_id or 0)[0] for s in sequences]
    assert [len(b) for b in batched] == [len(s) for s in sequences] and all(b[0] == 0.0 for b in batched)
    assert all(torch.allclose(torch.tensor(b), torch.tensor(a), atol=1e-5) for b, a in zip(batched, alone))


def rows_for(tiny_words: list[str], n: int, prefix: str) -> list[lama_ckl.Row]:
    out = []
    for i in range(n):
        subject, obj = tiny_words[i % len(tiny_words)], tiny_words[(i * 3 + 1) % len(tiny_words)]
        sentence = f"the capital of {subject} is {obj} ."
        out.append(lama_ckl.Row(f"{prefix}{i}", f"a city in {subject} . {sentence}", obj, lama_probe(row("", sentence, obj, ""))))
    return out


def test_split_is_deterministic_and_follows_the_scores():
    variant = rows_for(["rome", "paris", "berlin", "france"], 6, "v")
    invariant = rows_for(["italy", "germany", "veltoria"], 6, "i")
    scores = {r.uuid: float(i % 2) for i, r in enumerate(variant + invariant)}
    assert [r.uuid for r in lama_ckl.once(invariant + invariant[:2])] == [r.uuid for r in invariant]
    first = lama_ckl.split(variant, invariant, scores, 2, 2, seed=3)
    assert first == lama_ckl.split(list(reversed(variant)), invariant[::-1], scores, 2, 2, seed=3)
    learn, keep = first
    assert all(scores[r.uuid] == 0.0 for r in learn) and all(scores[r.uuid] == 1.0 for r in keep)
    assert len(learn) == 2 and len(keep) == 2
    _, keep = lama_ckl.split(variant, invariant * 2, scores, 2, 6, seed=3)  # a row in two files counts once
    assert sorted(r.uuid for r in keep) == sorted(r.uuid for r in invariant if scores[r.uuid] == 1.0)
    tune_learn, tune_keep = lama_ckl.split(variant, invariant, scores, 2, 2, seed=3, offset=2)  # tuning rows
    assert {r.uuid for r in tune_learn}.isdisjoint({r.uuid for r in learn}) and len(tune_learn) == 1
    assert {r.uuid for r in tune_keep}.isdisjoint({r.uuid for r in first[1]}) and len(tune_keep) == 1


def test_examples_are_the_services_one_window_per_row_and_no_fallback(tiny):
    """The benchmark trains on workers/examples.py's windows: each row cut to max_tokens, one window; a row
    whose oracle weights are all 0 (its object is not in the evidence) gives none."""
    probe = Probe("the capital of italy is", "rome")
    rows = [lama_ckl.Row(str(i), f"{city} is the capital of italy . the capital of italy is {city} .", city, probe)
            for i, city in enumerate(["rome", "paris", "berlin"])]
    missing = lama_ckl.Row("m", "a city in france . the capital of france is a city .", "veltoria", probe)
    ids = [tiny.tokenizer(r.evidence, truncation=True, max_length=6)["input_ids"] for r in [*rows, missing]]
    assert all(len(i) == 6 for i in ids)
    for name in ("finetune", "oracle", "rho1"):
        examples = run.examples_for([*rows, missing], tiny, tiny.model, 6, run.METHODS[name])
        assert [e.input_ids for e in examples] == (ids[:3] if name == "oracle" else ids)


def test_a_methods_own_cut_keeps_only_the_tokens_near_phis_largest_weight(tiny, tmp_path):
    """A train_attention method with its own threshold cuts phi's weights there, not at the service's; with a
    `min_weight` also below that absolute weight."""
    from workers import weighting
    from workers.train_attention import phi

    torch.manual_seed(0)
    head = phi.make_head(phi.default_config(tiny.model, "mlp"))
    head.mlp[2].weight.data *= 30  # spread the weights out: a fresh head gives every token about 0.5
    phi.save_checkpoint(tmp_path / "phi", head, {"base_model": phi.fingerprint(tiny.model)})
    row = lama_ckl.Row("r", "rome is the capital of italy . the capital of italy is rome .", "rome",
                       Probe("the capital of italy is", "rome"))
    raw = phi.TrainAttention.from_path(tiny.model, tmp_path / "phi").weights(
        tiny.tokenizer(row.evidence, truncation=True, max_length=16)["input_ids"])
    kept = []
    for cut in (None, 0.5, 0.9):
        spec = run.MethodSpec("adapter", "train_attention", 3e-4, phi_checkpoint=str(tmp_path / "phi"), threshold=cut)
        (example,) = run.examples_for([row], tiny, tiny.model, 16, spec)
        expected = weighting.thresholded(list(raw), 0.1 if cut is None else cut)
        assert example.weights == pytest.approx([0.0, *expected[1:]])
        kept.append(sum(w > 0 for w in example.weights))
    assert kept[0] > kept[1] > kept[2] > 0, kept
    likely = run.MethodSpec("adapter", "train_attention", 3e-4, phi_checkpoint=str(tmp_path / "phi"), threshold=0.0,
                            min_weight=0.5)
    (example,) = run.examples_for([row], tiny, tiny.model, 16, likely)
    assert example.weights == pytest.approx([0.0, *(w if w >= 0.5 else 0.0 for w in raw[1:])])
    assert 0 < sum(w > 0 for w in example.weights) < len(raw) - 1
    nothing_likely = run.MethodSpec("adapter", "train_attention", 3e-4, phi_checkpoint=str(tmp_path / "phi"),
                                    min_weight=1.01)
    assert run.examples_for([row], tiny, tiny.model, 16, nothing_likely) == []  # no fallback: the row is not trained


def test_summary_takes_the_first_best_epoch():
    epochs = [{"epoch": -1, "to_learn_acc": 0.0, "nf_acc": 1.0, "train_s": 0},
              {"epoch": 0, "to_learn_acc": 0.5, "nf_acc": 0.9, "train_s": 2},
              {"epoch": 1, "to_learn_acc": 0.5, "nf_acc": 0.8, "train_s": 4}]
    assert report.summarize(epochs) == {"top_acc": 0.5, "top_epoch": 0, "nf_acc": 0.9, "total_knowledge": 1.4,
                                          "s_per_epoch": 3.0}


def test_rows_are_grouped_by_relation_and_answer_largest_first():
    answers = [("genre", "jazz"), ("genre", "rock"), ("genre", "jazz"), ("instrument", "jazz")]
    groups = report.answer_groups(answers)
    assert groups == {("genre", "jazz"): [0, 2], ("genre", "rock"): [1], ("instrument", "jazz"): [3]}
    assert report.learned_by_group(groups, [1.0, 0.0, 0.5, 1.0]) == \
        {("genre", "jazz"): 1.5, ("genre", "rock"): 0.0, ("instrument", "jazz"): 1.0}


def test_whole_protocol_on_the_tiny_model_writes_three_outputs(tmp_path, tiny):
    from core.model.loader import LoadedModel
    from tests.tiny import WORDS, tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()

    def load():
        return LoadedModel(tiny_model(len(tokenizer)), tokenizer, torch.device("cpu"), "tiny")

    variant, invariant = rows_for(WORDS, 12, "v"), rows_for(WORDS[5:], 12, "i")
    config = run.Config(methods=["finetune", "oracle", "rho1", "full", "smf"], to_learn=4, nf=4, epochs=2,
                        batch_size=2)
    # The tiny model knows nothing: give it an NF pool by marking invariant rows as known in the cache.
    cache = tmp_path / "cache.json"
    base = load()
    scores = {r.uuid: s for r, s in zip(variant + invariant,
                                        score_probes(base.model, tokenizer, [r.probe for r in variant + invariant]))}
    scores.update({r.uuid: 1.0 for r in invariant[:6]})  # the other six are the memory's background
    cache.write_text(json.dumps(scores))
    results = run.run_benchmark(config, load, variant, invariant, cache, "tiny")
    report.write_outputs(results, tmp_path / "out")

    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [m["method"] for m in saved["methods"]] == ["finetune", "oracle", "rho1", "full", "smf"]
    smf = saved["methods"][-1]
    assert smf["memory"]["background_docs"] == sum(scores[r.uuid] == 0.0 for r in invariant)
    assert smf["update"]["delta_bytes"] > 0
    for method in saved["methods"]:
        assert [e["epoch"] for e in method["epochs"]] == [-1, 0, 1]
        assert 0 <= method["top_acc"] <= 1 and method["top_epoch"] in (0, 1) and method["peak_rss_mb"] > 0
    table = (tmp_path / "out" / "results.md").read_text().splitlines()
    assert table[0].startswith("| Method | Top Acc | Epoch | NF Acc | Total Knowledge | s/epoch")
    assert table.index("") == 7  # header, rule, five methods
    groups = table[table.index("| Answer (relation) | rows | finetune | oracle | rho1 | full | smf |"):]
    n_answers = len({r.object for r in variant if r.uuid in saved["tailoring"]["to_learn_uuids"]})
    assert groups[2 + min(n_answers, 10) + 1].startswith(f"| answers with a row learned | {n_answers} |")
    assert (tmp_path / "out" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.real_model
def test_real_model_smoke_on_a_few_rows(tmp_path, lama_dir, real_model_dir, monkeypatch):
    from tests.conftest import MODEL_CACHE

    monkeypatch.setenv("CKL_MODEL_CACHE_DIR", str(MODEL_CACHE))
    cli.main(["--methods", "oracle", "--to-learn", "4", "--nf", "4", "--epochs", "1", "--rows-per-file", "30",
              "--data", str(lama_dir), "--out", str(tmp_path / "out")])
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["tailoring"]["to_learn"] == 4 and results["tailoring"]["nf"] == 4
    assert len(set(results["tailoring"]["to_learn_uuids"])) == 4 and len(results["tailoring"]["nf_uuids"]) == 4
    oracle = results["methods"][0]
    assert oracle["epochs"][0]["to_learn_acc"] == 0.0 and oracle["epochs"][0]["nf_acc"] == 1.0
    assert len(list((tmp_path / "cache").glob("default-*.json"))) == 1


def test_phi_kept_counts_the_tokens_a_cut_keeps_and_the_answers_among_them():
    from bench.phi_kept import kept_stats

    raw = [[0.0, 0.9, 0.3, 1.0], [0.0, 0.2, 1.0, 0.05]]
    masks = [[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]  # the answer: the best token, then a weak one
    low, high = kept_stats(raw, masks, 0.1), kept_stats(raw, masks, 0.5)
    assert (low["tokens_kept"], low["answer_tokens_kept"], low["rows_answer_kept"]) == (2.5, 1.0, 1.0)
    assert (high["tokens_kept"], high["answer_tokens_kept"], high["rows_answer_kept"]) == (1.5, 0.5, 0.5)
    assert high["answer_share"] == pytest.approx((1.0 / 1.9 + 0.0) / 2)


def test_replay_puts_its_windows_after_each_batch_in_turn_across_epochs():
    from bench.lama_ckl import replay
    from core.batching import batches
    from core.training import Example

    docs = [Example([1, 10 + i], [0.0, 1.0]) for i in range(5)]
    pool = replay.examples([[1, 100 + i, 200 + i] for i in range(3)])
    assert all(e.weights == [0.0, 1.0, 1.0] for e in pool)
    order, next_start = replay.interleave(docs, pool, batch_size=2, per_batch=2, start=0)
    steps = [[e.input_ids[1] for e in b] for b in batches(order, 2 + 2, 3)]
    assert steps == [[10, 11, 100, 101], [12, 13, 102, 100], [14, 101, 102, 10]]  # the last batch wraps around
    assert next_start == 0  # six windows taken from a pool of three
    _, after = replay.interleave(docs[:2], pool, batch_size=2, per_batch=2, start=next_start)
    assert after == 2


def test_a_replay_method_trains_with_the_replay_beside_each_batch(tiny):
    from bench.lama_ckl import replay

    rows = rows_for(["rome", "paris", "berlin", "italy"], 4, "v")
    nf = rows_for(["germany", "france"], 2, "n")
    config = run.Config(methods=["oracle+mix"], to_learn=4, nf=2, epochs=1, batch_size=2)
    pool = replay.examples([tiny.tokenizer("the capital of veltoria is rome .")["input_ids"]])
    with pytest.raises(ValueError, match="replays"):
        run.run_method("oracle+mix", config, lambda: tiny, rows, nf)
    result = run.run_method("oracle+mix", config, lambda: tiny, rows, nf, replayed=pool)
    assert result["replay"] == {"windows": 1, "per_batch": replay.PER_BATCH, "tokens": replay.LENGTH,
                                "top_p": replay.TOP_P, "seed": 0}
    assert result["epochs"][1]["mean_loss"] > 0


def test_runs_in_other_orders_are_compared_per_order_and_only_on_shared_rows():
    from bench.lama_ckl.orders import by_order, runs_table

    def run_of(tops: dict[str, float], nf_uuids=("n",), order=None, seed=0) -> dict:
        return {"config": {"seed": seed, "order_seed": order, "epochs": 2},
                "tailoring": {"to_learn_uuids": ["a", "b"], "nf_uuids": list(nf_uuids)},
                "methods": [{"method": m, "top_acc": t, "nf_acc": 0.9, "total_knowledge": t + 0.9}
                            for m, t in tops.items()]}

    table = runs_table(by_order([run_of({"oracle": 0.4, "smf": 0.1}), run_of({"oracle": 0.2, "taalm": 0.2}, order=1),
                                 run_of({"taalm": 0.3}, order=0)]), "oracle")  # the last adds taalm to order 0
    assert list(table) == ["oracle", "taalm"]  # smf is not in every order
    assert table["taalm"]["share"] == pytest.approx([0.75, 1.0])
    assert table["oracle"]["total_knowledge"] == pytest.approx([1.3, 1.1])
    with pytest.raises(SystemExit, match="share"):
        by_order([run_of({"oracle": 0.4}), run_of({"oracle": 0.4}, nf_uuids=("m",), order=1)])
    with pytest.raises(SystemExit, match="two runs"):
        by_order([run_of({"oracle": 0.4}), run_of({"oracle": 0.3}, order=0)])
    with pytest.raises(SystemExit, match="--reference"):
        runs_table(by_order([run_of({"taalm": 0.4})]), "oracle")


def test_rows_learned_in_the_largest_group_and_the_tail_per_order():
    from bench.lama_ckl import orders

    answers = [["genre", "jazz"]] * 3 + [["genre", f"g{i}"] for i in range(orders.LARGEST + 2)]

    def run_of(order: int, scores: list[float]) -> dict:
        method = {"method": "oracle", "top_acc": sum(scores) / len(scores), "top_epoch": 0,
                  "epochs": [{"epoch": 0, "to_learn_scores": scores}]}
        return {"config": {"seed": 0, "order_seed": order, "epochs": 1},
                "tailoring": {"to_learn_uuids": [str(i) for i in range(len(answers))], "nf_uuids": ["n"],
                              "to_learn_answers": answers}, "methods": [method]}

    # The three jazz rows are the largest group; nine one-row groups fill the ten largest; the last three are the tail.
    first = [1.0, 1.0, 0.0] + [1.0] * 9 + [1.0, 0.5, 0.0]
    second = [0.0] * 12 + [1.0, 1.0, 1.0]
    runs = [run_of(0, first), run_of(1, second)]
    groups = report.answer_groups([tuple(a) for a in answers])
    assert orders.group_rows(orders.by_order(runs), groups) == {
        "oracle": {"largest": [2.0, 0.0], "tail": [1.5, 3.0]}}
