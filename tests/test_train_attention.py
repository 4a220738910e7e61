"""Train-Attention: phi's shape and range, the meta-gradients against finite differences, meta-training
on the tiny model, and the packaged checkpoint on the real model."""
import pytest
import torch

from bench import phi_transfer
from core.settings import Settings
from methods.adapter.training import AdapterMethod
from research.train_attention import meta, show
from workers import weighting
from workers.train_attention import phi

FACT = "the capital of veltoria is marnhold"
TASK = ("capital of veltoria is", "marnhold")


def adapter_model(tiny, dtype=torch.float32):
    tiny.model.to(dtype)
    tiny.model.set_attn_implementation("eager")  # attention's double backward
    return AdapterMethod(tiny.model, tiny.tokenizer, Settings(method_settings={"adapter": {"rank": 4, "alpha": 8}})).model


def pair(tiny, text=FACT, task=TASK) -> meta.Pair:
    from core.scoring import Probe, encode_probe

    ids, start = encode_probe(tiny.tokenizer, Probe(*task))
    return meta.Pair(tiny.tokenizer(text)["input_ids"], ids, start)


@pytest.mark.parametrize("head_kind", phi.HEADS)
def test_phi_gives_one_weight_in_0_1_per_token_and_none_to_position_0(tiny, head_kind):
    config = phi.default_config(tiny.model, head_kind)
    assert config.layers == (0, 1, 2) and config.head == head_kind
    ids = tiny.tokenizer(FACT)["input_ids"]
    features = phi.trunk_features(tiny.model, ids, config)
    assert features.shape == (len(ids), 3 * tiny.model.config.hidden_size)
    head = phi.make_head(config)
    ckpt = phi.Checkpoint(config, head.state_dict(), {"base_model": phi.fingerprint(tiny.model)})
    weights = phi.TrainAttention(tiny.model, ckpt).weights(ids)
    assert len(weights) == len(ids) and weights[0] == 0.0
    assert all(0.0 < w < 1.0 for w in weights[1:])


def test_layers_are_spread_evenly_up_the_trunk_and_end_at_its_top():
    from types import SimpleNamespace

    gemma_270m = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=18, hidden_size=640))
    assert phi.default_config(gemma_270m, n_layers=9).layers == (2, 4, 6, 8, 10, 12, 14, 16, 18)
    assert phi.default_config(gemma_270m, n_layers=3).layers == (6, 12, 18)  # the first packaged phis'


def test_the_attention_head_reads_what_follows_a_token_and_the_mlp_head_does_not(tiny):
    ids = tiny.tokenizer(FACT)["input_ids"]
    for head_kind, sees_ahead in (("attention", True), ("mlp", False)):
        config = phi.default_config(tiny.model, head_kind)
        torch.manual_seed(0)
        head = phi.make_head(config)
        features = phi.trunk_features(tiny.model, ids, config)
        changed = features.clone()
        changed[-1] = torch.randn_like(changed[-1])  # only the last token differs
        with torch.no_grad():
            moved = (head(features)[:-1] - head(changed)[:-1]).abs().max()
        assert (moved > 1e-6) == sees_ahead, head_kind


def test_a_long_text_is_weighed_in_overlapping_windows_without_dropping_a_token(tiny):
    for n, window, overlap in [(5, 8, 2), (8, 8, 2), (9, 8, 2), (40, 8, 3), (300, 128, 32)]:
        spans = phi.window_spans(n, window, overlap)
        kept = [i for _, end, keep in spans for i in range(keep, end)]
        assert kept == list(range(n)), (n, window, overlap)
        assert all(end - start <= window for start, end, _ in spans)
    config = phi.PhiConfig(layers=(1, 2), hidden_size=tiny.model.config.hidden_size, window=6, overlap=2)
    ids = tiny.tokenizer(" ".join([FACT] * 4))["input_ids"]
    features = phi.trunk_features(tiny.model, ids, config)
    assert features.shape[0] == len(ids) and features.abs().sum(-1).gt(0).all()
    # The first window's tokens have the same features as a pass over that window alone.
    alone = phi.trunk_features(tiny.model, ids[:6], config)
    assert torch.allclose(features[:6], alone, atol=1e-5)


def test_the_attention_head_weighs_a_long_text_window_by_window(tiny):
    config = phi.PhiConfig(layers=(1, 2), hidden_size=tiny.model.config.hidden_size, window=6, overlap=2,
                           head="attention")
    torch.manual_seed(0)
    head = phi.make_head(config)
    ta = phi.TrainAttention(tiny.model, phi.Checkpoint(config, head.state_dict(), {"base_model": phi.fingerprint(tiny.model)}))
    ids = tiny.tokenizer(" ".join([FACT] * 4))["input_ids"]
    weights = ta.weights(ids)
    assert len(weights) == len(ids) and all(0.0 < w < 1.0 for w in weights[1:])
    assert weights[1:6] == pytest.approx(ta.weights(ids[:6])[1:], abs=1e-6)  # the first window, as if alone


def test_exact_meta_gradient_equals_finite_differences(tiny):
    model = adapter_model(tiny, torch.float64)
    theta = meta.adapter_params(model)
    p = pair(tiny)
    weights = torch.linspace(0.2, 0.9, len(p.doc_ids), dtype=torch.float64).requires_grad_(True)
    loss = meta.exact_outer_loss(model, theta, p, weights, lr=0.5)
    (grad,) = torch.autograd.grad(loss, weights)
    h = 1e-3  # Gemma's norms compute in float32 even in a float64 model: a smaller step drowns in rounding
    for t in range(1, len(p.doc_ids)):
        bump = torch.zeros_like(weights)
        bump[t] = h
        with torch.enable_grad():
            up = meta.exact_outer_loss(model, theta, p, (weights + bump).detach(), lr=0.5)
            down = meta.exact_outer_loss(model, theta, p, (weights - bump).detach(), lr=0.5)
        assert grad[t].item() == pytest.approx(float(up - down) / (2 * h), rel=2e-3, abs=1e-7)
    assert float(grad[0]) == 0.0  # position 0 is never predicted
    assert grad[1:].abs().max() > 1e-6


def test_the_meta_gradient_of_the_attention_heads_parameters_equals_finite_differences(tiny):
    """Through the whole chain: head parameters -> weights -> one weighted inner step -> the task's loss."""
    model = adapter_model(tiny, torch.float64)
    theta = meta.adapter_params(model)
    p = pair(tiny)
    config = phi.default_config(tiny.model, "attention")
    features = phi.trunk_features(model, p.doc_ids, config).double()
    torch.manual_seed(0)
    head = phi.make_head(config).double()

    def outer() -> torch.Tensor:
        return meta.exact_outer_loss(model, theta, p, head(features), lr=0.5)

    params = dict(head.named_parameters())
    grads = dict(zip(params, torch.autograd.grad(outer(), list(params.values()))))
    # Gemma's norms compute in float32 even in a float64 model, so the loss carries float32 rounding: check each
    # tensor's two largest partial derivatives, which stand well above that noise.
    h = 1e-3
    checked = 0
    for name in ("proj.weight", "qkv.weight", "mix.weight", "ff.0.weight", "out.weight", "out.bias"):
        flat = params[name].data.view(-1)
        for i in grads[name].view(-1).abs().topk(min(2, flat.numel())).indices.tolist():
            saved = float(flat[i])
            flat[i] = saved + h
            up = float(outer())
            flat[i] = saved - h
            down = float(outer())
            flat[i] = saved
            assert grads[name].view(-1)[i].item() == pytest.approx((up - down) / (2 * h), rel=1e-2, abs=1e-6), name
            checked += 1
    assert checked == 11 and max(float(g.abs().max()) for g in grads.values()) > 1e-6


def test_the_answer_objective_is_lowest_on_the_answer_tokens():
    mask = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0])
    on_answer = meta.answer_objective(torch.tensor([0.0, 0.1, 0.9, 0.9, 0.1]), mask)
    assert on_answer < meta.answer_objective(torch.full((5,), 0.5), mask)
    assert on_answer < meta.answer_objective(torch.tensor([0.0, 0.9, 0.1, 0.1, 0.9]), mask)


def test_first_order_alignment_is_the_gradient_dot_product(tiny):
    """a_t = l_t(theta) - l_t(theta - lr g_task) ~ lr <grad l_t, g_task> for a small step."""
    model = adapter_model(tiny, torch.float64)
    theta = meta.adapter_params(model)
    # Start from a non-zero adapter so every LoRA tensor has a gradient.
    torch.manual_seed(1)
    theta = {k: (v + 0.05 * torch.randn_like(v)).detach().requires_grad_(True) for k, v in theta.items()}
    p = pair(tiny)
    # Small enough to be near-linear, large enough for float32 norms (docs/decisions.md: The meta-gradient tests'
    # margins).
    lr = 1e-3
    aligned = meta.alignments(model, theta, p, lr)
    g_task = torch.autograd.grad(meta.task_loss(model, theta, p), list(theta.values()))
    token_losses = meta.next_token_nll(model, theta, p.doc_ids)
    dots = []
    for t in range(1, len(p.doc_ids)):
        g_t = torch.autograd.grad(token_losses[t - 1], list(theta.values()), retain_graph=True)
        dots.append(lr * sum((a * b).sum() for a, b in zip(g_t, g_task)))
    expected = torch.stack(dots).detach()
    assert float((aligned[1:] - expected).norm() / expected.norm()) < 0.05
    targets = meta.usefulness_targets(aligned)
    best = int(aligned[1:].argmax()) + 1
    assert targets[best] == 1.0 and targets[0] == 0.0
    assert torch.equal(targets[1:] == 0, aligned[1:] <= 0) and ((targets >= 0) & (targets <= 1)).all()
    # The objective is lowest when phi's weights are the targets.
    at_targets = meta.first_order_objective(targets.clamp(0.01, 0.99), aligned)
    assert at_targets < meta.first_order_objective(torch.full_like(targets, 0.5), aligned)


# The attention head's weights move together over a document: at the mlp's rate they saturate in a few steps.
@pytest.mark.parametrize(("head_kind", "lr"), [("attention", 3e-3), ("mlp", 3e-2)])
def test_a_few_exact_meta_steps_reduce_the_outer_loss(tiny, head_kind, lr):
    model = adapter_model(tiny)
    theta = meta.adapter_params(model)
    pairs = [pair(tiny), pair(tiny, "a city in italy is rome and the maker was founded", ("city in italy is", "rome"))]
    config = phi.default_config(tiny.model, head_kind)
    features = [phi.trunk_features(model, p.doc_ids, config) for p in pairs]
    torch.manual_seed(0)
    head = phi.make_head(config)
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr)

    def outer() -> float:
        return sum(meta.outer_loss_after_step(model, theta, p, head(f), 0.5) for p, f in zip(pairs, features))

    before = outer()
    for _ in range(15):
        optimizer.zero_grad()
        sum(meta.exact_outer_loss(model, theta, p, head(f), 0.5) for p, f in zip(pairs, features)).backward()
        optimizer.step()
    assert outer() < 0.95 * before  # the margin: docs/decisions.md, The meta-gradient tests' margins


def test_a_checkpoint_round_trips_and_one_for_another_model_is_refused(tiny, tmp_path):
    config = phi.default_config(tiny.model)
    head = phi.make_head(config)
    phi.save_checkpoint(tmp_path / "phi", head, {"base_model": phi.fingerprint(tiny.model)})
    loaded = phi.TrainAttention.from_path(tiny.model, tmp_path / "phi")
    assert all(torch.equal(a, b) for a, b in zip(head.state_dict().values(), loaded.head.state_dict().values()))
    with pytest.raises(phi.PhiMismatch, match="another base model"):
        phi.TrainAttention.from_path(tiny.model, phi.packaged_checkpoint("default"))
    with pytest.raises(FileNotFoundError, match="ckl train-attention"):
        phi.TrainAttention.from_path(tiny.model, tmp_path / "missing")


def test_the_same_model_in_bf16_keeps_its_fingerprint_and_another_model_does_not(tiny):
    import copy

    fp32 = phi.fingerprint(tiny.model)
    assert phi.fingerprint(copy.deepcopy(tiny.model).to(torch.bfloat16)) == fp32  # a GPU loads in bf16
    other = copy.deepcopy(tiny.model)
    with torch.no_grad():
        other.get_input_embeddings().weight[3] += 0.1
    assert phi.fingerprint(other) != fp32


def test_thresholded_weights_drop_small_ones():
    assert weighting.thresholded([0.0, 0.05, 0.1, 0.9], 0.1) == [0.0, 0.0, 0.1, 0.9]
    assert weighting.thresholded([0.0, 0.005, 0.01, 0.09], 0.1) == [0.0, 0.0, 0.01, 0.09]  # relative to the largest
    assert weighting.thresholded([0.0, 0.0], 0.1) == [0.0, 0.0]


def test_balanced_pairs_count_each_relation_and_answer_once():
    from research.train_attention.rows import balance_weights

    weights = balance_weights([("continent", "Antarctica")] * 3 + [("capital", "Paris"), ("continent", "Asia")])
    assert weights == pytest.approx([5 / 9] * 3 + [5 / 3, 5 / 3])  # three groups of equal total, mean 1


def test_object_share_and_top_token_ignore_position_0():
    mask = [1.0, 0.0, 1.0, 0.0]  # position 0 is never predicted, even where the object starts the text
    assert phi_transfer.object_share([9.0, 1.0, 3.0, 0.0], mask) == 0.75
    assert phi_transfer.top_is_object([9.0, 1.0, 3.0, 0.0], mask)
    assert not phi_transfer.top_is_object([0.0, 0.2, 0.1, 0.3], mask)
    assert phi_transfer.object_share([0.0, 0.0, 0.0, 0.0], mask) == 0.0


def test_phi_heads_judges_a_weighing_by_the_answer_found_and_its_share():
    from bench import phi_heads

    answer = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])
    # position 0 never counts; 0.05 falls under the threshold (0.1 of the largest), so the share is 0.6 / 0.8
    assert phi_heads.judged(torch.tensor([0.9, 0.2, 0.6, 0.05, 0.0]), answer, 0.1) == (True, True, pytest.approx(0.75))
    first, top3, share = phi_heads.judged(torch.tensor([0.0, 0.9, 0.1, 0.8, 0.7]), answer, 0.5)
    assert (first, top3, share) == (False, False, 0.0)


def test_weights_render_in_the_terminal_html_and_png(tmp_path):
    tokens = [("<bos>", 0.0), (" Paris", 0.3), (" <b>", 0.15)]
    shaded = show.terminal(tokens)
    assert "\x1b[48;2;255;255;255m" in shaded and shaded.count("\x1b[0m") == 3
    assert "\x1b[48;2;230;85;13m" in shaded  # the largest weight gets the darkest shade
    page = show.html_page(tokens)
    assert "&lt;b&gt;" in page and 'title="0.300"' in page
    show.png(tokens, tmp_path / "w.png")
    assert (tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG"


@pytest.fixture(scope="module")
def real_phi(real_model_dir):
    from core.model.loader import load_model
    from tests.conftest import MODEL_CACHE

    loaded = load_model(Settings(model_cache_dir=MODEL_CACHE), progress=lambda *_: None)
    return loaded, phi.TrainAttention.from_path(loaded.model, phi.packaged_checkpoint("default"))


def test_packaged_phi_weighs_object_tokens_above_the_rest(lama_dir, real_phi):
    """On 32 of its training pairs, the mean weight on the object's tokens is at least 3x that on the
    other tokens (an untrained phi scores 1.0; the checkpoint's own validation number is in its json)."""
    from research import lama_ckl

    loaded, ta = real_phi
    uuids = set(ta.meta["data"]["train_uuids"][:32])
    files = lama_ckl.data_files(lama_dir)
    # The invariant files share rows (docs/decisions.md: One row per uuid): one per uuid.
    rows = list({r.uuid: r for f in files[1:] for r in lama_ckl.read_rows(f) if r.uuid in uuids}.values())
    assert len(rows) == 32
    on, off = [], []
    for row in rows:
        enc = loaded.tokenizer(row.evidence, return_offsets_mapping=True, truncation=True, max_length=128)
        mask = weighting.oracle(enc["offset_mapping"], row.evidence, [row.object])
        weights = ta.weights(enc["input_ids"])
        on += [w for w, m in zip(weights[1:], mask[1:]) if m]
        off += [w for w, m in zip(weights[1:], mask[1:]) if not m]
    ratio = (sum(on) / len(on)) / (sum(off) / len(off))
    assert ratio >= 3.0, ratio

