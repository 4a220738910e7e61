"""Continuous batching on the tiny model: batched decoding gives every request the tokens it gets alone, a swap
lands between steps without mixing versions, a closed stream frees its row, and requests wait before a 429."""
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from core.model.served_model import ServingModel
from core.routing.table import Table, Taught
from core.state import Knowledge
from methods.routed.serving import Deltas
from service.errors import ApiError
from service.generations import GenerationService
from service.metrics import Metrics
from serving.batching import Scheduler
from serving.generation import Generation, SamplingParams, generate, stream
from tests.test_serving import SETTINGS, random_adapter

WINDOW = 16  # the tiny model's sliding window (tests/tiny.py)


def watch(serving: ServingModel, hooks: dict[int, Callable[[], None]]) -> list[tuple[int, int, int]]:
    """Record (version, rows, cache columns) of every forward pass; run hooks[n] right after the n-th (between
    two steps, the serving lock free)."""
    steps: list[tuple[int, int, int]] = []
    original = serving.run

    def run(version, fn, routes=None, rows=None):
        out = original(version, fn, routes, rows)
        steps.append((version, out.logits.shape[0], out.cache.get_seq_length()))
        if hook := hooks.pop(len(steps), None):
            hook()
        return out
    serving.run = run
    return steps


def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def consume(pieces, into: dict, name) -> threading.Thread:
    def read():
        into[name] = list(pieces)
    thread = threading.Thread(target=read)
    thread.start()
    return thread


def submitted(scheduler: Scheduler, start: Callable[[], threading.Thread], threads: list) -> Callable[[], None]:
    """A hook that starts a request and returns once it waits for admission, so it joins at the next round."""
    def hook():
        before = scheduler.waiting()
        threads.append(start())
        until(lambda: scheduler.waiting() > before)
    return hook


def test_batched_decoding_gives_every_request_its_one_at_a_time_tokens(tiny):
    serving = ServingModel(tiny, SETTINGS)
    tok = tiny.tokenizer
    long_prompt = "the capital of france is paris and the capital of germany is berlin and the capital of italy is"
    prompts = ["the capital of", long_prompt, "a city", "paris", "new product company chief executive", "veltoria"]
    plain = generate(serving, tok(long_prompt)["input_ids"], SamplingParams(12))
    params = [SamplingParams(40),  # runs past the window in the batch
              SamplingParams(12, stop=(plain.text.split()[-1],)),  # a prompt longer than the window, a stop string
              SamplingParams(3),
              SamplingParams(25, stop=("xyz", "rom")),  # stop strings never found: text held back, sent at the end
              SamplingParams(30),
              SamplingParams(20, temperature=0.9, top_p=0.9, seed=7)]  # sampled, its own generator
    ids = [tok(p)["input_ids"] for p in prompts]
    assert len(ids[1]) > WINDOW
    alone = [list(stream(serving, i, p)) for i, p in zip(ids, params)]

    scheduler = Scheduler(serving, max_running=8)
    results: dict[int, list] = {}
    threads: list[threading.Thread] = []

    def start(n):
        return lambda: consume(scheduler.stream(ids[n], params[n]), results, n)
    # Requests join at different steps of a running batch (each prefill is a forward pass of its own).
    steps = watch(serving, {1: submitted(scheduler, start(1), threads), 2: submitted(scheduler, start(2), threads),
                            6: submitted(scheduler, start(3), threads), 12: submitted(scheduler, start(4), threads),
                            20: submitted(scheduler, start(5), threads)})
    threads.append(start(0)())
    until(lambda: len(threads) == len(prompts) and not any(t.is_alive() for t in threads), 60)

    assert plain.finish_reason == "length" and alone[1][-1].finish_reason == "stop"
    for n, expected in enumerate(alone):
        *pieces, result = results[n]
        *expected_pieces, reference = expected
        assert pieces == expected_pieces, prompts[n]  # the same tokens, cut and streamed the same way
        assert (result.text, result.completion_tokens, result.finish_reason) == \
            (reference.text, reference.completion_tokens, reference.finish_reason), prompts[n]
    assert max(rows for _, rows, _ in steps) >= 4
    assert any(rows >= 3 and columns > WINDOW for _, rows, columns in steps)  # a batch past the window
    assert scheduler.running() == 0 and serving._pins[0] == 0


def test_a_swap_during_a_batch_keeps_each_answer_on_the_version_it_reports(tiny):
    serving = ServingModel(tiny, SETTINGS)
    ids = [tiny.tokenizer(p)["input_ids"] for p in ("the capital of", "a city in", "paris and berlin")]
    params = SamplingParams(max_new_tokens=30)
    on_0 = [generate(serving, i, params) for i in ids]
    delta = random_adapter(serving, 2)
    scheduler = Scheduler(serving, max_running=8)
    results: dict = {}
    threads: list[threading.Thread] = []

    def swap():  # version 1 lands between two steps of version 0's batch; the next requests pin it
        serving.install(1, delta)
        for n, i in enumerate(ids):
            submitted(scheduler, lambda n=n, i=i: consume(scheduler.stream(i, params), results, ("after", n)),
                      threads)()
    steps = watch(serving, {6: swap})
    threads += [consume(scheduler.stream(i, params), results, ("before", n)) for n, i in enumerate(ids)]
    until(lambda: len(threads) == 2 * len(ids) and not any(t.is_alive() for t in threads), 60)
    del serving.run  # the class's own again
    on_1 = [generate(serving, i, params) for i in ids]

    for n in range(len(ids)):
        before, after = results[("before", n)][-1], results[("after", n)][-1]
        assert before.knowledge_version == 0 and before.text == on_0[n].text
        assert after.knowledge_version == 1 and after.text == on_1[n].text
    assert any(a.text != b.text for a, b in zip(on_0, on_1))
    versions = [version for version, _, _ in steps]
    assert 0 in versions[versions.index(1):]  # both versions' groups decoded in turn
    assert max(rows for version, rows, _ in steps if version == 1) == len(ids)
    assert serving._pins[0] == serving._pins[1] == 0


def generations_on(tiny, **limits) -> GenerationService:
    # No document store beside the decoder: its requests are answered as weights, reading no text.
    settings = SETTINGS.model_copy(update={"limits": SETTINGS.limits.model_copy(update=limits), "method_settings": {
        **SETTINGS.method_settings, "routed": {"knowledge_as": "weights"}}})
    runtime = SimpleNamespace(settings=settings, serving=ServingModel(tiny, settings), error=None)
    return GenerationService(runtime, Metrics(runtime))


def test_a_closed_stream_frees_its_row_at_the_next_step(tiny):
    generations = generations_on(tiny, max_concurrent_generations=1, max_waiting_generations=0)
    serving, scheduler = generations.serving(), generations.scheduler()
    ids = tiny.tokenizer("the capital of")["input_ids"]
    closed = threading.Event()
    steps = watch(serving, {2: lambda: closed.wait(10)})  # the first request's second step waits for the close
    first = generations.stream(ids, SamplingParams(max_new_tokens=100))
    assert isinstance(next(first), str)
    with pytest.raises(ApiError) as full:
        generations.stream(ids, SamplingParams(max_new_tokens=1))
    assert full.value.status == 429 and full.value.headers == {"Retry-After": "1"}
    first.close()  # a client that went away
    closed.set()
    *_, done = generations.stream(ids, SamplingParams(max_new_tokens=3))  # admitted at once; decoded after the next step
    assert isinstance(done, Generation) and done.completion_tokens <= 3
    assert len(steps) <= 2 + 3  # the closed request decoded no step past the one running when it closed
    assert scheduler.running() == 0 and serving._pins[0] == 0


def test_a_stream_nobody_reads_or_closes_gives_its_slot_back_when_the_decoder_retires_it(tiny):
    """A response cancelled mid-stream neither reads nor closes what it was reading: the slot must not wait for
    the garbage collector."""
    generations = generations_on(tiny, max_concurrent_generations=1, max_waiting_generations=0)
    scheduler = generations.scheduler()
    ids = tiny.tokenizer("the capital of")["input_ids"]
    abandoned = generations.stream(ids, SamplingParams(max_new_tokens=5))
    assert isinstance(next(abandoned), str)  # a client read one piece, then went away; `abandoned` stays referenced
    until(lambda: scheduler.running() == 0)
    deadline = time.monotonic() + 10
    while True:  # the slot comes back just after the row leaves the batch
        try:
            again = generations.stream(ids, SamplingParams(max_new_tokens=2))
            break
        except ApiError as busy:
            assert busy.status == 429 and time.monotonic() < deadline, "the slot was never given back"
            time.sleep(0.01)
    *_, done = again
    assert isinstance(done, Generation) and abandoned is not None


def test_a_stream_closed_while_another_thread_reads_it_leaves_the_decoder_at_the_next_round(tiny):
    """A streamed response's events are read in a worker thread; the response that ends (its client gone) closes
    them from another. The generator cannot be closed while it is being read, yet its row must not go on decoding
    for nobody."""
    generations = generations_on(tiny, max_concurrent_generations=1, max_waiting_generations=0)
    scheduler = generations.scheduler()
    ids = tiny.tokenizer("the capital of")["input_ids"]
    stream = generations.stream(ids, SamplingParams(max_new_tokens=100_000))
    results: dict = {}
    reader = consume(stream, results, "read")  # always inside next(), waiting for the decoder's next piece
    until(lambda: scheduler.running() == 1)
    stream.close()
    until(lambda: scheduler.running() == 0)  # before: it decoded all 100,000 tokens for nobody
    reader.join(30)
    assert not reader.is_alive()


def test_a_waiting_stream_closed_while_another_thread_reads_it_ends_its_reader(tiny):
    generations = generations_on(tiny, max_concurrent_generations=1, max_waiting_generations=1)
    scheduler = generations.scheduler()
    ids = tiny.tokenizer("the capital of")["input_ids"]
    first = generations.stream(ids, SamplingParams(max_new_tokens=100_000))
    next(first)  # decoding: the only row
    waiting = generations.stream(ids, SamplingParams(max_new_tokens=5))
    results: dict = {}
    reader = consume(waiting, results, "waiting")  # blocked until its first piece, which never comes
    until(lambda: scheduler.waiting() == 1)
    waiting.close()
    reader.join(10)
    assert not reader.is_alive(), "the reader of a closed waiting stream was left blocked"
    first.close()
    until(lambda: scheduler.running() == scheduler.waiting() == 0)


def test_two_decodes_of_one_request_end_apart_and_leave_together(tiny):
    """`knowledge_as: both` decodes a request's prompt two ways under the request's one cancel event: the way that
    ends first must not cut the other short (it cut a paragraph's answer to its first tokens, an article's to none);
    the client going away retires both."""
    serving = ServingModel(tiny, SETTINGS)
    scheduler = Scheduler(serving, max_running=8)
    ids = tiny.tokenizer("the capital of")["input_ids"]
    alone = generate(serving, ids, SamplingParams(20))
    request, results = threading.Event(), {}
    readers = [consume(scheduler.stream(ids, SamplingParams(2), cancel=request), results, "short"),
               consume(scheduler.stream(ids, SamplingParams(20), cancel=request), results, "long")]
    for reader in readers:
        reader.join(60)
    assert results["short"][-1].completion_tokens == 2
    assert (results["long"][-1].text, results["long"][-1].completion_tokens) == (alone.text, alone.completion_tokens)
    gone = threading.Event()
    readers = [consume(scheduler.stream(ids, SamplingParams(100_000), cancel=gone), results, way) for way in "ab"]
    until(lambda: scheduler.running() == 2)
    gone.set()
    until(lambda: scheduler.running() == 0)
    for reader in readers:
        reader.join(30)
        assert not reader.is_alive()


def test_requests_wait_for_a_row_and_only_past_the_waiting_queue_get_429(tiny):
    generations = generations_on(tiny, max_concurrent_generations=1, max_waiting_generations=1)
    serving, scheduler = generations.serving(), generations.scheduler()
    ids = tiny.tokenizer("the capital of")["input_ids"]
    checked = threading.Event()
    steps = watch(serving, {3: lambda: checked.wait(10)})
    first = generations.stream(ids, SamplingParams(max_new_tokens=20))
    next(first)
    results: dict = {}
    waiter = consume(generations.stream(ids, SamplingParams(max_new_tokens=5)), results, "second")
    until(lambda: scheduler.waiting() == 1 and scheduler.running() == 1)  # the first decodes, the second waits
    with pytest.raises(ApiError) as full:
        generations.stream(ids, SamplingParams(max_new_tokens=1))
    assert full.value.status == 429 and full.value.headers == {"Retry-After": "1"}
    checked.set()
    *_, one = first
    waiter.join(30)
    two = results["second"][-1]
    assert one.finish_reason and two.finish_reason
    assert max(rows for _, rows, _ in steps) == 1  # the waiting request never joined the running one's batch
    assert two.timing["first_token_s"] > 0 and scheduler.waiting() == scheduler.running() == 0


def random_routed(serving: ServingModel, keys: dict[str, dict[str, float]], version: int) -> None:
    """Install `version` holding one routed document per key, each with a random delta (read from its own
    version, as the store would)."""
    lora = serving.methods["routed"].lora
    deltas = {}
    for n, document_id in enumerate(keys, start=1):
        tensors = lora.fresh(seed=n)
        for name, tensor in tensors.items():
            if name.endswith(".B"):
                tensor.data.normal_(0, 0.3, generator=torch.Generator().manual_seed(n))
        deltas[n] = {k: v.detach().clone() for k, v in tensors.items()}
    table = Table([Taught(d, key, n, method="routed") for n, (d, key) in enumerate(keys.items(), start=1)])
    stored = Deltas({d: n for n, d in enumerate(keys, start=1)}, deltas.__getitem__)
    serving.install(version, Knowledge(table, {"routed": stored}))


def test_prompts_routed_to_different_documents_share_one_forward_pass_with_their_own_answers(tiny):
    serving = ServingModel(tiny, SETTINGS)
    random_routed(serving, {"a": {"veltoria": 5.0}, "b": {"marnhold": 5.0}}, version=1)
    tok = tiny.tokenizer
    prompts = ["the capital of veltoria is", "marnhold is a city in", "the capital of france is",
               "veltoria and marnhold", "the capital of veltoria was founded by"]
    assert [serving.routes(1, p)["routed"] for p in prompts] == [("a",), ("b",), None, ("a", "b"), ("a",)]
    ids = [tok(p)["input_ids"] for p in prompts]
    alone = [list(stream(serving, i, SamplingParams(10))) for i in ids]
    assert alone[0][-1].text != list(stream(serving, ids[0], SamplingParams(10), version=0))[-1].text  # a delta

    scheduler = Scheduler(serving, max_running=8)
    results: dict[int, list] = {}
    threads: list[threading.Thread] = []
    start = [lambda n=n: consume(scheduler.stream(ids[n], SamplingParams(10)), results, n) for n in range(5)]
    steps = watch(serving, {1: submitted(scheduler, start[1], threads), 2: submitted(scheduler, start[2], threads),
                            3: submitted(scheduler, start[3], threads), 4: submitted(scheduler, start[4], threads)})
    threads.append(start[0]())
    until(lambda: len(threads) == 5 and not any(t.is_alive() for t in threads), 60)
    for n, expected in enumerate(alone):
        assert results[n][-1].text == expected[-1].text, prompts[n]
    assert max(rows for _, rows, _ in steps) == 5  # four routes and none, in one pass


def test_prompts_admitted_together_are_prefilled_in_one_padded_pass_and_answer_as_alone(tiny):
    serving = ServingModel(tiny, SETTINGS)
    random_routed(serving, {"a": {"veltoria": 5.0}, "b": {"marnhold": 5.0}}, version=1)
    tok = tiny.tokenizer
    long_prompt = "the capital of france is paris and the capital of germany is berlin and the capital of veltoria is"
    prompts = ["paris", long_prompt, "marnhold is a city in", "the capital of", "veltoria"]
    ids = [tok(p)["input_ids"] for p in prompts]
    assert len(ids[1]) > WINDOW  # a padded prefill past the sliding window
    params = [SamplingParams(12), SamplingParams(12), SamplingParams(1), SamplingParams(12),
              SamplingParams(12, temperature=0.9, top_p=0.9, seed=3)]  # one ends at its first token
    alone = [list(stream(serving, i, p)) for i, p in zip(ids, params)]

    scheduler = Scheduler(serving, max_running=8)
    results: dict[int, list] = {}
    threads: list[threading.Thread] = []
    start = [lambda n=n: consume(scheduler.stream(ids[n], params[n]), results, n) for n in range(5)]
    together = [submitted(scheduler, start[n], threads) for n in range(1, 5)]
    steps = watch(serving, {1: lambda: [hook() for hook in together]})  # all four wait for the same round
    threads.append(start[0]())
    until(lambda: len(threads) == 5 and not any(t.is_alive() for t in threads), 60)
    for n, expected in enumerate(alone):
        assert results[n][:-1] == expected[:-1] and results[n][-1].text == expected[-1].text, prompts[n]
    # The passes: the first prompt's prefill, its first step, then the four prompts' prefill in one.
    assert [rows for _, rows, _ in steps[:3]] == [1, 1, 4]


def test_decoding_counts_as_busy_while_it_runs_and_for_a_moment_after(tiny):
    """What the embedded learner yields to: the generation service says it decodes while a sequence runs, and for
    BUSY_GAP_S after (a client's next request follows its last at once); an idle service is not busy."""
    generations = generations_on(tiny)
    assert not generations.decoding()
    ids = tiny.tokenizer("the capital of")["input_ids"]
    stream = generations.stream(ids, SamplingParams(max_new_tokens=3))
    assert isinstance(next(stream), str) and generations.decoding()
    *_, done = stream
    assert isinstance(done, Generation) and generations.decoding()  # just ended: still busy
    scheduler = generations.scheduler()
    deadline = time.monotonic() + 10
    while scheduler.busy(within_s=0):  # the decoding thread ends once nothing is left
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert scheduler.busy(within_s=60) and not scheduler.busy(within_s=0)  # ended a moment ago
