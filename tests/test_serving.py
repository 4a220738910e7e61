"""Version 0 is the base model exactly; versions swap between decoding steps without mixing."""
import threading

import pytest
import torch

from core.model.served_model import ServingModel
from core.settings import Settings
from core.state import Knowledge
from methods.adapter import layer as adapter
from methods.memory import layer as memory_layer
from serving.generation import SamplingParams, cut_at_stop, generate, sample_token
from workers.preview import AutoProbePreview
from workers.threads import on_every_core
from workers.train_attention import phi

SETTINGS = Settings(method_settings={"adapter": {"rank": 4, "alpha": 8}})


def random_adapter(serving: ServingModel, seed: int) -> Knowledge:
    gen = torch.Generator().manual_seed(seed)
    state = adapter.read_state(serving.methods["adapter"].peft, "v0")
    tensors = {k: torch.randn(v.shape, generator=gen) * 0.5 for k, v in state.items()}
    return Knowledge(states={"adapter": adapter.LoraState(tensors, adapter.config_to_dict(adapter.lora_config(4, 8)))})


def test_version_0_logits_are_the_base_models(tiny):
    ids = torch.tensor([tiny.tokenizer("the capital of france is paris")["input_ids"]])
    with torch.no_grad():
        base = tiny.model(ids).logits.clone()
    serving = ServingModel(tiny, SETTINGS)
    assert torch.equal(serving.run(0, lambda m: m(ids).logits), base)
    serving.install(1, random_adapter(serving, 1))
    assert not torch.allclose(serving.run(1, lambda m: m(ids).logits), base)
    serving.install(0, None)
    assert torch.equal(serving.run(0, lambda m: m(ids).logits), base)


def test_swap_during_generation_keeps_the_pinned_version(tiny):
    serving = ServingModel(tiny, SETTINGS)
    prompt = tiny.tokenizer("the capital of")["input_ids"]
    params = SamplingParams(max_new_tokens=40)
    baseline = generate(serving, prompt, params)
    delta = random_adapter(serving, 2)

    # Swap in version 1 from another thread as soon as the first decoding step of a request has run.
    original_run = serving.run
    swapped = threading.Event()

    def run_and_swap(version, fn, routes=None):
        out = original_run(version, fn, routes)
        if not swapped.is_set():
            swapped.set()
            threading.Thread(target=serving.install, args=(1, delta)).start()
        return out

    serving.run = run_and_swap
    during = generate(serving, prompt, params)
    serving.run = original_run
    assert swapped.is_set() and serving.current == 1
    assert during.knowledge_version == 0 and during.text == baseline.text
    after = generate(serving, prompt, params)
    assert after.knowledge_version == 1
    assert serving._loaded == {0, 1}


def test_memory_versions_swap_in_only_their_rows(tiny, tmp_path):
    config = memory_layer.MemoryConfig(layer=1, n_sub_keys=8, heads=2, k=4, key_dim=8)
    memory_layer.save_base(tmp_path / "memory", memory_layer.ProductKeyMemory(config, 32), {}, {"source": "test"})
    ids = torch.tensor([tiny.tokenizer("the capital of france is paris")["input_ids"]])
    with torch.no_grad():
        base = tiny.model(ids).logits.clone()
    serving = ServingModel(tiny, SETTINGS.model_copy(update={"data_dir": tmp_path}))
    torch.manual_seed(0)
    rows = torch.arange(64)  # every slot, so the tiny text surely reads some
    serving.install(1, Knowledge(states={"memory": {"rows": rows, "values": torch.randn(64, 32)}}))
    one = serving.run(1, lambda m: m(ids).logits.clone())
    assert not torch.allclose(one, base)
    assert torch.equal(serving.run(0, lambda m: m(ids).logits), base)
    memory = serving.methods["memory"].memory
    assert memory.values.abs().sum() == 0  # version 0's rows: none
    with serving.pinned() as pinned:  # a request still decoding on version 1 while version 2 lands
        assert pinned == 1
        serving.install(2, Knowledge(states={"memory": {"rows": torch.tensor([3]), "values": torch.ones(1, 32)}}))
        serving.run(2, lambda m: None)
        assert memory.values.abs().sum(-1).nonzero().squeeze(-1).tolist() == [3]
        assert torch.equal(serving.run(1, lambda m: m(ids).logits), one)
    serving.run(2, lambda m: None)
    assert serving._loaded == {0, 2} and memory.values.abs().sum(-1).nonzero().squeeze(-1).tolist() == [3]


def test_greedy_and_nucleus_sampling():
    logits = torch.tensor([0.0, 3.0, 2.9, -5.0])
    assert sample_token(logits, 0.0, 1.0, None) == 1
    gen = torch.Generator().manual_seed(0)
    picks = {sample_token(logits, 1.0, 0.5, gen) for _ in range(50)}
    assert picks == {1}  # p = 0.51, 0.46, 0.03, 0.0002: top_p 0.5 keeps the top token only
    gen = torch.Generator().manual_seed(0)
    assert {sample_token(logits, 1.0, 0.99, gen) for _ in range(200)} == {1, 2, 0}
    assert sample_token(logits, 1.0, 1e-300, gen) == 1  # rounds to 0 in float32: still the top token


def test_stop_strings_cut_at_the_earliest():
    assert cut_at_stop("Paris, France. It", (".", ",")) == ("Paris", True)
    assert cut_at_stop("Paris", ("\n",)) == ("Paris", False)


def test_an_older_version_a_request_names_loads_outside_the_decoding_lock_and_stays_held(tiny):
    """Loading a version a request names composes its lineage and routing index (seconds at 100,000 documents):
    decoding steps go on meanwhile, a second request for it waits for that load rather than making its own, and it
    stays held for the next request once the first is done."""
    serving = ServingModel(tiny, SETTINGS)
    serving.install(1, random_adapter(serving, 1))
    serving.install(2, random_adapter(serving, 2))  # version 1 is dropped: no request pins it
    loading, finish, loads = threading.Event(), threading.Event(), []

    def load() -> Knowledge:
        loads.append(1)
        loading.set()
        assert finish.wait(10)
        return random_adapter(serving, 1)

    def ask() -> None:
        with serving.pinned(1, load) as pinned:
            assert pinned == 1

    first, second = threading.Thread(target=ask), threading.Thread(target=ask)
    first.start()
    assert loading.wait(10)
    second.start()
    decoding_went_on = serving._lock.acquire(timeout=5)  # what every decoding step takes
    serving._lock.release()
    finish.set()
    first.join(10), second.join(10)
    assert decoding_went_on and loads == [1]
    with serving.pinned(1, load):
        assert loads == [1] and serving._loaded == {0, 1, 2}


def test_a_preview_holds_the_decoding_lock_one_window_at_a_time(tiny, tmp_path):
    """phi's pass over a previewed text runs window by window, each one decoding step's hold of the lock: decoding
    goes on between two windows however long the text (the whole pass under the lock stopped every answer)."""
    config = phi.PhiConfig(layers=(1, 2), hidden_size=tiny.model.config.hidden_size, window=6, overlap=2,
                           head="attention")
    phi.save_checkpoint(tmp_path / "phi", phi.make_head(config), {"base_model": phi.fingerprint(tiny.model)})
    settings = SETTINGS.model_copy(update={"training": SETTINGS.training.model_copy(
        update={"phi_checkpoint": tmp_path / "phi"})})
    serving = ServingModel(tiny, settings)
    text = "the capital of veltoria is marnhold. " * 4
    windows = len(phi.window_spans(len(tiny.tokenizer(text)["input_ids"]), config.window, config.overlap))
    original, holds = serving.run, []

    def run(version, fn, routes=None):
        holds.append(version)
        return original(version, fn, routes)

    serving.run = run
    assert on_every_core(lambda: AutoProbePreview(settings)(serving, text, "routed")) is not None
    assert windows > 1 and holds == [0] * windows


@pytest.mark.every_core
def test_a_preview_computes_on_one_thread_and_leaves_the_others_theirs(tiny):
    """A preview's thread computes on one OpenMP thread: a second team of threads beside the decoder's, even idle,
    slowed every decoding step after it (docs/decisions.md: "A preview computes on one thread")."""
    serving = ServingModel(tiny, SETTINGS)

    def previewed() -> int:
        AutoProbePreview(SETTINGS)(serving, "The capital of Veltoria is Marnhold.", "routed")
        return torch.get_num_threads()

    default = on_every_core(torch.get_num_threads)
    if default == 1:
        pytest.skip("a thread computes on one thread here anyway")
    assert on_every_core(previewed) == 1 and on_every_core(torch.get_num_threads) == default

