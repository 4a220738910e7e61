"""Version 0 is the base model exactly; versions swap between decoding steps without mixing."""
import threading

import torch

from service.knowledge import adapter
from service.model.generation import SamplingParams, cut_at_stop, generate, sample_token
from service.model.serving import ServingModel


def random_delta(serving: ServingModel, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    state = adapter.read_state(serving.peft, "v0")
    return {k: torch.randn(v.shape, generator=gen) * 0.5 for k, v in state.items()}


def test_version_0_logits_are_the_base_models(tiny):
    ids = torch.tensor([tiny.tokenizer("the capital of france is paris")["input_ids"]])
    with torch.no_grad():
        base = tiny.model(ids).logits.clone()
    config = adapter.lora_config(4, 8)
    serving = ServingModel(tiny, config)
    assert torch.equal(serving.run(0, lambda m: m(ids).logits), base)
    serving.install(1, random_delta(serving, 1), config)
    assert not torch.allclose(serving.run(1, lambda m: m(ids).logits), base)
    serving.install(0, None, None)
    assert torch.equal(serving.run(0, lambda m: m(ids).logits), base)


def test_swap_during_generation_keeps_the_pinned_version(tiny):
    config = adapter.lora_config(4, 8)
    serving = ServingModel(tiny, config)
    prompt = tiny.tokenizer("the capital of")["input_ids"]
    params = SamplingParams(max_new_tokens=40)
    baseline = generate(serving, prompt, params)
    delta = random_delta(serving, 2)

    # Swap in version 1 from another thread as soon as the first decoding step of a request has run.
    original_run = serving.run
    swapped = threading.Event()

    def run_and_swap(version, fn):
        out = original_run(version, fn)
        if not swapped.is_set():
            swapped.set()
            threading.Thread(target=serving.install, args=(1, delta, config)).start()
        return out

    serving.run = run_and_swap
    during = generate(serving, prompt, params)
    serving.run = original_run
    assert swapped.is_set() and serving.current == 1
    assert during.knowledge_version == 0 and during.text == baseline.text
    after = generate(serving, prompt, params)
    assert after.knowledge_version == 1
    assert serving._loaded == {0, 1}


def test_greedy_and_nucleus_sampling():
    logits = torch.tensor([0.0, 3.0, 2.9, -5.0])
    assert sample_token(logits, 0.0, 1.0, None) == 1
    gen = torch.Generator().manual_seed(0)
    picks = {sample_token(logits, 1.0, 0.5, gen) for _ in range(50)}
    assert picks == {1}  # p = 0.51, 0.46, 0.03, 0.0002: top_p 0.5 keeps the top token only
    gen = torch.Generator().manual_seed(0)
    assert {sample_token(logits, 1.0, 0.99, gen) for _ in range(200)} == {1, 2, 0}


def test_stop_strings_cut_at_the_earliest():
    assert cut_at_stop("Paris, France. It", (".", ",")) == ("Paris", True)
    assert cut_at_stop("Paris", ("\n",)) == ("Paris", False)
