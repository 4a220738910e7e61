"""The product-key memory and the sparse-memory method on the tiny model."""
from dataclasses import replace

import torch

from core.scoring import Probe, score_probes
from core.settings import Settings
from core.training import Example
from methods.memory import layer as memory_layer
from methods.memory.training import Background, MemoryMethod, hubs, kl_score, tfidf, top_slots, whitening
from workers import weighting

CONFIG = memory_layer.MemoryConfig(layer=1, n_sub_keys=16, heads=2, k=4, key_dim=8)


def test_product_key_lookup_equals_brute_force_topk():
    torch.manual_seed(0)
    mem = memory_layer.ProductKeyMemory(CONFIG, hidden_size=32)
    hidden = torch.randn(5, 7, 32)
    slots, weights = mem.lookup(hidden)
    q = mem.queries(hidden)  # [5, 7, heads, 2, half]
    for h in range(CONFIG.heads):
        s1 = q[..., h, 0, :] @ mem.sub_keys[h, 0].T  # [5, 7, n_sub]
        s2 = q[..., h, 1, :] @ mem.sub_keys[h, 1].T
        full = (s1.unsqueeze(-1) + s2.unsqueeze(-2)).flatten(-2)  # every slot i * n_sub + j
        best, idx = full.topk(CONFIG.k, dim=-1)
        assert torch.equal(slots[..., h, :], idx)
        assert torch.allclose(weights[..., h, :], best.softmax(-1))


def test_a_larger_score_scale_sharpens_the_read_weights_over_the_same_slots():
    torch.manual_seed(0)
    flat, sharp = (memory_layer.ProductKeyMemory(replace(CONFIG, score_scale=s), 32) for s in (1.0, 20.0))
    hidden = torch.randn(5, 7, 32)
    (slots_flat, w_flat), (slots_sharp, w_sharp) = flat.lookup(hidden), sharp.lookup(hidden)
    assert torch.equal(slots_flat, slots_sharp)
    assert (w_sharp.amax(-1) > w_flat.amax(-1)).all()


def make(tiny, top_t=500):
    settings = Settings(training={"check_every": 1, "max_grad_norm": 0}, method_settings={"memory": {"learning_rate": 50.0, "top_t": top_t}})
    return MemoryMethod(tiny.model, tiny.tokenizer, settings, shape=CONFIG)


def fact(tiny) -> Example:
    text = "the capital of veltoria is marnhold"
    enc = tiny.tokenizer(text, return_offsets_mapping=True)
    return Example(enc["input_ids"], weighting.oracle(enc["offset_mapping"], text, ["marnhold"]))


def test_version_0_logits_are_unchanged_with_the_memory_attached(tiny):
    ids = torch.tensor([tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]])
    with torch.no_grad():
        base = tiny.model(ids).logits.clone()
        make(tiny)
        assert torch.equal(tiny.model(ids).logits, base)


def test_gradients_reach_only_the_selected_rows_and_the_delta_applies_and_reverts(tiny):
    ids = torch.tensor([tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]])
    with torch.no_grad():
        base = tiny.model(ids).logits.clone()
    method = make(tiny, top_t=3)
    report = method.train([fact(tiny)], 4, lambda: False)
    changed = method.memory.values.abs().sum(-1).nonzero().squeeze(-1)
    assert report.steps == 4 and 0 < changed.numel() <= 4 * 3
    assert set(changed.tolist()) <= method.rows_touched
    delta = method.delta()
    assert set(changed.tolist()) <= set(delta["rows"].tolist()) == method.rows_touched
    with torch.no_grad():
        trained = tiny.model(ids).logits.clone()
        assert not torch.equal(trained, base)
        method.load(None)
        assert torch.equal(tiny.model(ids).logits, base)
        method.load(delta)
        assert torch.equal(tiny.model(ids).logits, trained)


def test_the_memory_learns_a_fact(tiny):
    method = make(tiny)
    probe = [Probe("the capital of veltoria is", "marnhold")]
    assert score_probes(method.model, tiny.tokenizer, probe) == [0.0]
    report = method.train([fact(tiny)], 60, lambda: score_probes(method.model, tiny.tokenizer, probe) == [1.0])
    assert report.stopped_early, report.losses[-5:]


def test_whitening_evens_out_the_background_directions():
    gen = torch.Generator().manual_seed(0)
    scales = torch.tensor([30.0, 10.0, 1.0, 0.1])
    x = torch.randn(4000, 4, generator=gen) * scales + torch.tensor([5.0, 0.0, 0.0, 0.0])
    mean, w = whitening(x, floor=0.0)
    variances = ((x - mean) @ w).var(0)
    assert torch.allclose(mean, torch.tensor([5.0, 0.0, 0.0, 0.0]), atol=1.5)
    assert variances.max() / variances.min() < 1.2  # the input's ratio is 90,000
    floored = ((x - mean) @ whitening(x, floor=0.01)[1]).var(0)
    assert floored[3] < floored[2] < floored[0] * 1.05  # the floor keeps the smallest directions small
    assert torch.equal(whitening(torch.ones(3, 4))[1], torch.eye(4))


def test_fitted_queries_are_centred_on_the_background(tiny):
    method = make(tiny)
    docs = [tiny.tokenizer(t)["input_ids"] for t in ("the capital of veltoria is marnhold", "a cat sat on the mat",
                                                         "rivers run to the sea", "the moon circles the earth")]
    captured = []
    hook = method.memory.register_forward_pre_hook(lambda _m, args: captured.append(args[0].detach().flatten(0, -2)))
    method.fit_background(docs)
    hook.remove()
    queries = method.memory.queries(torch.cat(captured[: len(docs)]))
    assert queries.mean(0).abs().max() < 1e-3 * queries.abs().mean()


def test_tfidf_prefers_slots_the_background_rarely_reads():
    tf = torch.tensor([4.0, 4.0, 0.0, 1.0])
    background = Background(df=torch.tensor([90, 1, 0, 0]), documents=100, reads=torch.tensor([900, 1, 0, 0]),
                            positions=1000)
    scores = tfidf(tf, background)
    assert scores[1] > scores[0] and scores[2] == 0
    assert top_slots(scores, tf, 2).tolist() == [1, 3]
    assert kl_score(tf, background)[1] > kl_score(tf, background)[0]


def test_hubs_are_slots_read_at_a_large_share_of_background_positions():
    background = Background(df=torch.tensor([100, 100, 3, 0]), documents=100, reads=torch.tensor([300, 20, 3, 0]),
                            positions=1000)
    # Slot 1 is read somewhere in every document but at only 2% of positions: not a hub.
    assert hubs(background, 0.05).tolist() == [True, False, False, False]
    assert not hubs(Background.empty(4), 0.0).any()  # no background: nothing is a hub


def test_background_statistics_count_documents_and_positions(tiny):
    method = make(tiny)
    docs = [tiny.tokenizer(t)["input_ids"] for t in ("a cat sat on the mat", "rivers run to the sea")]
    method.fit_background(docs)
    bg = method.background
    reads_per_position = method.shape.heads * method.shape.k
    assert bg.documents == 2 and bg.positions == sum(map(len, docs))
    assert int(bg.reads.sum()) == bg.positions * reads_per_position
    assert int(bg.df.max()) <= 2 and bool((bg.df <= bg.reads).all())
    tensors, counts = bg.stored()
    again = Background.from_stored(tensors, counts)
    assert torch.equal(again.reads, bg.reads) and again.positions == bg.positions


FACTS = [("the capital of veltoria is marnhold", "the capital of veltoria is", "marnhold"),
         ("the maker of the new product is germany", "the maker of the new product is", "germany"),
         ("the chief executive of the company is rome", "the chief executive of the company is", "rome")]


def test_three_memory_updates_then_removing_the_middle_one_keeps_the_other_two(tiny, tmp_path):
    from core.state import resolve
    from workers.learner import Learner

    settings = Settings(data_dir=tmp_path, training={"max_steps": 60, "check_every": 1},
                        gate={"nf_tolerance": 1.0, "learned_tolerance": 1.0}, method_settings={"memory": {"sub_keys": 64, "heads": 2, "k": 4, "key_dim": 8,
                                                    "learning_rate": 10.0}})
    learner = Learner(settings, loaded=tiny)
    ids = []
    for text, prompt, answer in FACTS:
        record, _ = learner.documents.create({"text": text, "probes": [{"prompt": prompt, "answer": answer}],
                                              "method": "memory", "weighting": "oracle"}, None)
        assert learner.learn(record["document_id"]) == "committed", learner.documents.get(record["document_id"])
        ids.append(record["document_id"])
    assert learner.versions.current() == 3
    assert [learner.versions.manifest(v)["method"] for v in (1, 2, 3)] == ["memory"] * 3

    removal, _ = learner.documents.create({"text": "", "probes": [], "method": "memory", "weighting": "uniform",
                                           "removes": ids[1]}, None)
    assert learner.learn(removal["document_id"]) == "committed", learner.documents.get(removal["document_id"])
    assert learner.versions.current() == 4 and learner.versions.manifest(4)["removes"] == ids[1]
    assert learner.documents.get(ids[1])["removed_in_version"] == 4

    method = learner.methods["memory"]
    method.load(resolve(learner.versions, 4).get("memory"))
    probes = [Probe(prompt, answer) for _, prompt, answer in FACTS]
    assert score_probes(method.model, tiny.tokenizer, probes) == [1.0, 0.0, 1.0]


def test_phi_reads_the_base_model_even_with_memory_rows_written(tiny):
    from workers.train_attention import phi

    ids = tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]
    config = phi.default_config(tiny.model)
    before = phi.trunk_features(tiny.model, ids, config)
    method = make(tiny)
    with torch.no_grad():
        method.memory.values.normal_()
    assert torch.equal(phi.trunk_features(tiny.model, ids, config), before)
    assert method.memory.enabled


def test_a_memory_document_is_learned_served_and_removed_through_the_api(tmp_path):
    """The API story of the memory method, on the tiny model in-process (on the real model, fitting the
    memory's version-0 state alone takes over two minutes, too long for every CI run)."""
    from tests.api_app import tiny_client, tiny_settings, wait_final, wait_version

    fact = {"text": "the capital of veltoria is marnhold", "method": "memory",
            "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}
    with tiny_client(tiny_settings(tmp_path)) as client:
        record = wait_final(client, client.post("/documents", json=fact).json()["document_id"])
        assert record["status"] == "committed" and record["scores"]["own_after"] == [1.0], record
        assert wait_version(client, 1, "the capital of veltoria is")["text"].strip() == "marnhold"
        assert (tmp_path / "memory" / "base.safetensors").exists()
        manifest = client.learner.versions.manifest(1)
        assert manifest["delta_file"] == "memory_rows.safetensors" and manifest["delta_bytes"] < 200_000  # rows
        removal = client.delete(f"/documents/{record['document_id']}")
        assert removal.status_code == 202, removal.text
        done = wait_final(client, removal.json()["document_id"])
        assert done["status"] == "committed" and done["version"] == 2, done
        assert wait_version(client, 2, "the capital of veltoria is")["text"].strip() != "marnhold"
        assert client.get("/health/forgetting").json()["learned"]["probes"] == 0
        again = client.delete(f"/documents/{done['document_id']}")
        assert again.status_code == 409 and again.json()["error"]["code"] == "not_removable"
        twice = client.delete(f"/documents/{record['document_id']}")
        assert twice.status_code == 409 and twice.json()["error"]["code"] == "already_removed"
