"""The decoder shared between keys, on the tiny model: a key holds at most its share of the generation places, a
key's long prompts wait while others decode once its share is spent, and a long prompt is prefilled alone."""
import threading
from types import SimpleNamespace

import pytest

from core.keys import Caller
from core.model.served_model import ServingModel
from service.errors import ApiError
from serving.batching import Scheduler
from serving.generation import Generation, SamplingParams, stream
from serving.shares import held_back
from tests.test_batching import consume, generations_on, until, watch
from tests.test_serving import SETTINGS


def test_one_key_holds_at_most_its_share_of_the_places_and_gets_them_back(tiny):
    generations = generations_on(tiny, max_concurrent_generations=1, max_waiting_generations=4,
                                 max_generations_per_key=2)
    ids = tiny.tokenizer("the capital of")["input_ids"]
    held = threading.Event()
    watch(generations.serving(), {2: lambda: held.wait(10)})  # the decoder waits at its second step
    one, other = Caller("app", frozenset({"generate"})), Caller("other", frozenset({"generate"}))
    running = [generations.stream(ids, SamplingParams(max_new_tokens=100), caller=one) for _ in range(2)]
    with pytest.raises(ApiError) as full:
        generations.stream(ids, SamplingParams(max_new_tokens=1), caller=one)
    assert full.value.status == 429 and "this key has 2" in full.value.message
    running.append(generations.stream(ids, SamplingParams(max_new_tokens=100), caller=other))  # its own places
    for stream_ in running:
        stream_.close()
    held.set()
    *_, done = generations.stream(ids, SamplingParams(max_new_tokens=2), caller=one)  # given back on close
    assert isinstance(done, Generation)


def test_a_senders_long_prompts_wait_their_share_while_another_senders_answer_decodes(tiny):
    """After a chunk of one of its long prompts, a sender's next chunk waits while another sender's answer decodes
    (its share of the decoder is spent), and so does its next long prompt; with the whole decoder to share (1), they
    run at once."""
    serving = ServingModel(tiny, SETTINGS)
    short = tiny.tokenizer("the capital of")["input_ids"]
    long = tiny.tokenizer("the capital of france is paris and the capital of germany is berlin and")["input_ids"]
    assert held_back(SimpleNamespace(prompt_ids=long, sender="b"), {"a"}, len(short), {"b": 10.0}, 5.0)
    assert not held_back(SimpleNamespace(prompt_ids=long, sender="b"), {"b"}, len(short), {"b": 10.0}, 5.0)
    assert not held_back(SimpleNamespace(prompt_ids=short, sender="b"), {"a"}, len(short), {"b": 10.0}, 5.0)
    for share, order in ((0.001, ["a", "first", "second"]), (1.0, ["first", "second", "a"])):
        scheduler = Scheduler(serving, max_running=8, prefill_share=share, free_tokens=len(short))
        results: dict = {}
        answer = consume(scheduler.stream(short, SamplingParams(60), sender="a"), results, "a")
        until(lambda: scheduler.running() == 1)
        consume(scheduler.stream(long, SamplingParams(2), sender="b"), results, "first").join(30)
        second = consume(scheduler.stream(long, SamplingParams(2), sender="b"), results, "second")
        answer.join(30), second.join(30)
        assert list(results) == order, share


def test_a_long_prompt_is_prefilled_a_chunk_a_round_between_the_others_steps(tiny):
    """A prompt over `free_tokens` is prefilled that many tokens at a time, a step of the answer already decoding
    between two chunks (it never waits for the whole prefill), and answers as it does prefilled at once (the prompt
    runs past the tiny model's 16-token sliding window)."""
    serving = ServingModel(tiny, SETTINGS)
    long = tiny.tokenizer(" ".join(["the capital of france is paris and"] * 3))["input_ids"]
    assert len(long) > 16
    alone = "".join(p for p in stream(serving, long, SamplingParams(8)) if isinstance(p, str))
    scheduler = Scheduler(serving, max_running=8, free_tokens=4)
    results: dict = {}
    running = consume(scheduler.stream(tiny.tokenizer("the sky is")["input_ids"], SamplingParams(60)), results, "a")
    until(lambda: scheduler.running() == 1)
    widths = input_widths(serving)
    consume(scheduler.stream(long, SamplingParams(8)), results, "long").join(30)
    running.join(30)
    assert "".join(p for p in results["long"] if isinstance(p, str)) == alone
    chunks = [i for i, width in enumerate(widths) if width > 1]
    assert [widths[i] for i in chunks] == [4] * (len(long) // 4) + [len(long) % 4] * bool(len(long) % 4)
    assert all(later - earlier == 2 for earlier, later in zip(chunks, chunks[1:]))  # the other answer's step between


def test_a_long_prompt_takes_a_decoding_row_only_for_its_last_chunk(tiny):
    """With every row decoding, a long prompt is still admitted and prefilled between the steps, but for its last
    chunk, which waits for a row; it then answers as it does prefilled at once."""
    serving = ServingModel(tiny, SETTINGS)
    long = tiny.tokenizer(" ".join(["the capital of france is paris and"] * 3))["input_ids"]
    alone = "".join(p for p in stream(serving, long, SamplingParams(8)) if isinstance(p, str))
    scheduler = Scheduler(serving, max_running=1, free_tokens=4)
    results: dict = {}
    running = consume(scheduler.stream(tiny.tokenizer("the sky is")["input_ids"], SamplingParams(300), sender="a"),
                      results, "a")
    until(lambda: scheduler.running() == 1)
    waiting = consume(scheduler.stream(long, SamplingParams(8), sender="b"), results, "long")
    last = (len(long) - 1) // 4 * 4  # the tokens prefilled before the last chunk
    until(lambda: scheduler.long.prefilling and scheduler.long.prefilling[0].done == last)
    assert "a" not in results and scheduler.long.prefilling[0].done == last  # the row is the running answer's
    running.join(30), waiting.join(30)
    assert "".join(p for p in results["long"] if isinstance(p, str)) == alone


def input_widths(serving: ServingModel) -> list[int]:
    """The number of tokens each row of every forward pass of `serving` takes in from now on."""
    widths: list[int] = []
    original = serving.run

    def run(version, fn, routes=None, rows=None):
        def model(m):
            def called(**kwargs):
                widths.append(kwargs["input_ids"].shape[1])
                return m(**kwargs)
            return fn(called)
        return original(version, model, routes, rows)
    serving.run = run
    return widths


def test_a_long_prompt_is_prefilled_alone_not_with_short_ones_padded_to_its_length(tiny):
    serving = ServingModel(tiny, SETTINGS)
    short = tiny.tokenizer("the capital of")["input_ids"]
    long = tiny.tokenizer("the capital of france is paris and the capital of germany is berlin and")["input_ids"]
    scheduler = Scheduler(serving, max_running=8, free_tokens=len(short))
    results: dict = {}
    waited, go = threading.Event(), threading.Event()
    steps = watch(serving, {2: lambda: (waited.set(), go.wait(10))})  # the decoder holds after its second pass
    threads = [consume(scheduler.stream(short, SamplingParams(20)), results, "running")]
    assert waited.wait(10)
    threads += [consume(scheduler.stream(i, SamplingParams(3)), results, n) for n, i in (("short", short),
                                                                                         ("long", long))]
    until(lambda: scheduler.waiting() == 2)
    go.set()
    for thread in threads:
        thread.join(30)
    assert set(results) == {"running", "short", "long"}
    assert (0, 1, len(long)) in steps and (0, 2, len(long)) not in steps  # admitted together, prefilled apart
