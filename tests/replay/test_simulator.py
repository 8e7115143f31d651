"""The bundled simulator, spoken to by the unmodified OpenAI SDK over loopback HTTP."""

from __future__ import annotations

import json
import math
import socket
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import openai
import pydantic
import pytest

from quiver._errors import SimulatorError
from quiver.replay import (
    SAMPLE_KEY_HEADER,
    FaultConfig,
    Fields,
    LatencyConfig,
    SimRequest,
    Simulator,
    SimulatorConfig,
    SimulatorProcess,
    Text,
    check_loopback,
    complete,
    sim_model,
)
from quiver.replay._sim import SimRequestError

# --------------------------------------------------------------------------- models


@sim_model("test-close")
def _close_call(req: SimRequest) -> Text:
    """Three answers with close logits; ``beta`` is the argmax."""
    return Text({"alpha": 0.0, "beta": 0.2, "gamma": 0.1})


@sim_model("test-ranked")
def _ranked(req: SimRequest) -> Fields:
    """One group with a clear argmax (``first``) and runner-up (``second``)."""
    return Fields(answer={"first": 2.0, "second": 1.0, "third": 0.0})


@sim_model("test-verdict")
def _verdict(req: SimRequest) -> Fields:
    """Two sampled groups and one fixed field."""
    return Fields(verdict={"yes": 1.0, "no": 0.0}, score={1: 0.5, 2: 0.4, 3: 0.0}, version=2)


@sim_model("test-slow")
def _slow(req: SimRequest) -> Text:
    """An answer that takes 0.4 s to compute."""
    time.sleep(0.4)
    return Text({"done": 0.0})


@sim_model("test-picky")
def _picky(req: SimRequest) -> Text:
    """Refuses a request without a system message."""
    if not req.system_text:
        raise SimRequestError("test-picky needs a system message", "messages")
    return Text("fine")


MESSAGES = [
    {"role": "system", "content": "You route support tickets."},
    {"role": "user", "content": "My billing statement shows a double charge"},
]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture(scope="module")
def client(sim: Simulator) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.url, api_key="sk-test", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def faulty() -> Iterator[Any]:
    """Start simulators with faults; each is stopped at the end of the test."""
    started: list[Simulator] = []

    def start(client_timeout_s: float = 30, **faults: Any) -> tuple[Simulator, openai.OpenAI]:
        simulator = Simulator(SimulatorConfig(faults=FaultConfig(**faults))).start()
        started.append(simulator)
        return simulator, openai.OpenAI(
            base_url=simulator.url, api_key="sk-test", max_retries=0, timeout=client_timeout_s
        )

    yield start
    for simulator in started:
        simulator.stop()


def ask(sdk: openai.OpenAI, model: str = "test-close", key: str = "", **params: Any) -> Any:
    return sdk.chat.completions.create(
        model=model,
        messages=params.pop("messages", MESSAGES),
        extra_headers={SAMPLE_KEY_HEADER: key},
        **params,
    )


def post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST raw bytes to the simulator; return the status and the JSON body."""
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def binomial_interval(n: int, p: float, level: float = 0.99) -> tuple[int, int]:
    """The central ``level`` acceptance interval of Binomial(n, p), exact."""
    tail = (1 - level) / 2
    cdf, low, high = 0.0, None, None
    for k in range(n + 1):
        cdf += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if low is None and cdf >= tail:
            low = k
        if high is None and cdf >= 1 - tail:
            high = k
    assert low is not None and high is not None
    return low, high


def write_model_module(directory: Path, module: str, model: str) -> None:
    (directory / f"{module}.py").write_text(textwrap.dedent(f"""
        from quiver.replay._sim import Fields, sim_model

        @sim_model({model!r})
        def plugged(req):
            return Fields(label={{"spam": 0.3, "ham": 0.7}}, length=len(req.last_user))
    """))


# --------------------------------------------------------------------------- the SDK path


def test_unmodified_sdk_gets_a_chat_completion(client: openai.OpenAI) -> None:
    reply = ask(client, "sim-echo")

    assert reply.choices[0].message.content == "My billing statement shows a double charge"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.object == "chat.completion"
    assert reply.system_fingerprint == "quiver-sim"
    assert reply.id.startswith("chatcmpl-") and len(reply.id) == len("chatcmpl-") + 24
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 7)
    assert reply.usage.total_tokens == 18


def test_models_endpoint_lists_the_registered_models(client: openai.OpenAI) -> None:
    names = {model.id for model in client.models.list()}

    assert {"sim-echo", "sim-json", "test-close", "test-verdict"} <= names


def test_health_endpoint_answers_ok(sim: Simulator) -> None:
    base = sim.url.removesuffix("/v1")
    with urllib.request.urlopen(f"{base}/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok"}


def test_n_returns_that_many_indexed_choices(client: openai.OpenAI) -> None:
    reply = ask(client, "test-close", "k", n=3)

    assert [choice.index for choice in reply.choices] == [0, 1, 2]


# --------------------------------------------------------------------------- purity


def test_same_request_and_key_give_the_identical_response(client: openai.OpenAI) -> None:
    first = ask(client, "test-verdict", "trace-1/noop/0", logprobs=True, top_logprobs=2)
    second = ask(client, "test-verdict", "trace-1/noop/0", logprobs=True, top_logprobs=2)

    assert first.model_dump() == second.model_dump()


def test_two_simulator_instances_give_the_identical_response(client: openai.OpenAI) -> None:
    here = ask(client, "test-verdict", "trace-2/flip/1", logprobs=True, n=2)
    with Simulator() as other:
        with openai.OpenAI(base_url=other.url, api_key="sk-test", max_retries=0) as sdk:
            there = ask(sdk, "test-verdict", "trace-2/flip/1", logprobs=True, n=2)

    assert here.model_dump() == there.model_dump()


def test_different_sample_keys_give_different_samples_at_temperature_one(
    client: openai.OpenAI,
) -> None:
    answers = Counter(ask(client, key=f"k{i}").choices[0].message.content for i in range(50))

    assert len(answers) > 1
    assert set(answers) <= {"alpha", "beta", "gamma"}


def test_temperature_zero_gives_the_argmax_for_every_key(client: openai.OpenAI) -> None:
    answers = {
        ask(client, key=f"k{i}", temperature=0).choices[0].message.content for i in range(50)
    }

    assert answers == {"beta"}


def test_nondeterminism_gives_the_runner_up_at_its_rate() -> None:
    config = SimulatorConfig(nondeterminism=0.2)
    with Simulator(config) as noisy:
        with openai.OpenAI(base_url=noisy.url, api_key="sk-test", max_retries=0) as sdk:
            replies = [ask(sdk, "test-ranked", f"k{i}", temperature=0) for i in range(400)]
    answers = Counter(json.loads(r.choices[0].message.content)["answer"] for r in replies)

    low, high = binomial_interval(400, 0.2)
    assert set(answers) <= {"first", "second"}
    assert low <= answers["second"] <= high


def test_top_p_samples_only_from_the_nucleus() -> None:
    # test-close: beta 0.367, gamma 0.332, alpha 0.301 at temperature 1.
    def answers(top_p: float) -> set[str]:
        request = SimRequest(model="test-close", messages=MESSAGES, top_p=top_p, n=60)
        return {choice.content for choice in complete(request)}

    assert answers(0.3) == {"beta"}
    assert answers(0.6) == {"beta", "gamma"}
    assert answers(1.0) == {"alpha", "beta", "gamma"}


def test_concurrent_requests_get_the_answers_of_sequential_ones(client: openai.OpenAI) -> None:
    keys = [f"parallel-{i}" for i in range(40)]
    sequential = [ask(client, "test-verdict", key).model_dump() for key in keys]
    with ThreadPoolExecutor(max_workers=8) as pool:
        concurrent = list(pool.map(lambda key: ask(client, "test-verdict", key).model_dump(), keys))

    assert concurrent == sequential


def test_max_tokens_truncates_a_text_answer_with_finish_reason_length(
    client: openai.OpenAI,
) -> None:
    reply = ask(client, "sim-echo", max_tokens=3)

    assert reply.choices[0].message.content == "My billing statement"
    assert reply.choices[0].finish_reason == "length"


def test_a_tiny_temperature_samples_the_argmax_with_finite_logprobs() -> None:
    request = SimRequest(model="test-close", messages=MESSAGES, temperature=1e-310, logprobs=True,
                         top_logprobs=3, n=5)

    choices = complete(request)
    assert {choice.content for choice in choices} == {"beta"}
    top = choices[0].logprobs[0]["top_logprobs"]  # type: ignore[index]
    assert [entry["logprob"] for entry in top] == [0.0, -9999.0, -9999.0]


def test_a_model_refusing_a_request_answers_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="needs a system message"):
        ask(client, "test-picky", messages=MESSAGES[1:])
    assert ask(client, "test-picky").choices[0].message.content == "fine"


# --------------------------------------------------------------------------- structured answers


def test_sim_json_fills_a_json_schema_response_format(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "category": {"type": "string", "enum": ["billing", "technical", "other"]},
            "double_charge": {"type": "boolean"},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "summary": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["category", "double_charge", "priority", "summary", "tags"],
        "additionalProperties": False,
    }
    reply = ask(
        client,
        "sim-json",
        temperature=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "ticket", "schema": schema},
        },
    )

    answer = json.loads(reply.choices[0].message.content)
    assert list(answer) == list(schema["properties"])
    assert answer["category"] == "billing"
    assert answer["double_charge"] is True
    assert 1 <= answer["priority"] <= 5
    assert answer["summary"] == "My billing statement shows a double charge"
    assert answer["tags"] == []


def test_sim_json_fills_a_property_named_self(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"self": {"type": "string"}}}
    reply = ask(client, "sim-json", response_format={
        "type": "json_schema", "json_schema": {"name": "me", "schema": schema}})

    assert json.loads(reply.choices[0].message.content) == {"self": MESSAGES[1]["content"]}


@pytest.mark.parametrize(
    ("response_format", "message"),
    [
        ({"type": "json"}, "'response_format.type' must be one of 'text', 'json_object', 'json_schema'"),
        ({"type": "json_schema", "json_schema": "ticket"}, "'response_format.json_schema' must be an object"),
        ({"type": "json_schema", "json_schema": {"schema": [1]}}, "must be a JSON schema object or null"),
        ({"type": "json_schema", "json_schema": {"schema": {"properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}}}}},
         "expands to more than 4096 fields"),
    ],
)
def test_a_response_format_the_simulator_cannot_read_is_a_bad_request(
    client: openai.OpenAI, response_format: dict[str, Any], message: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=message):
        ask(client, "sim-json", response_format=response_format)


class Route(pydantic.BaseModel):
    team: Literal["billing", "technical"]
    refund: bool


class Ticket(pydantic.BaseModel):
    route: Route
    note: str | None


def test_sdk_parse_helper_reads_sim_json_answers_to_pydantic_schemas(
    client: openai.OpenAI,
) -> None:
    reply = client.chat.completions.parse(
        model="sim-json", messages=MESSAGES, response_format=Ticket, temperature=0
    )

    parsed = reply.choices[0].message.parsed
    assert parsed == Ticket(
        route=Route(team="billing", refund=False),
        note="My billing statement shows a double charge",
    )


def test_logprobs_give_one_entry_per_group_with_top_alternatives(
    client: openai.OpenAI,
) -> None:
    reply = ask(client, "test-verdict", "k", logprobs=True, top_logprobs=2)

    answer = json.loads(reply.choices[0].message.content)
    entries = reply.choices[0].logprobs.content
    assert [entry.token for entry in entries] == [answer["verdict"], str(answer["score"]), "2"]
    assert [len(entry.top_logprobs) for entry in entries] == [2, 2, 1]
    assert entries[1].top_logprobs[0].token == "1" and entries[1].top_logprobs[1].token == "2"
    assert math.isclose(sum(math.exp(top.logprob) for top in entries[0].top_logprobs), 1.0)
    assert entries[2].logprob == 0.0
    assert all(entry.bytes == list(entry.token.encode()) for entry in entries)


def test_logprobs_do_not_change_the_sample(client: openai.OpenAI) -> None:
    plain = ask(client, "test-verdict", "same-key")
    with_logprobs = ask(client, "test-verdict", "same-key", logprobs=True)

    assert plain.choices[0].message.content == with_logprobs.choices[0].message.content
    assert plain.choices[0].logprobs is None


# --------------------------------------------------------------------------- faults


def test_rate_limit_fault_raises_rate_limit_error_with_retry_headers(faulty: Any) -> None:
    simulator, sdk = faulty(rate_429=1.0, retry_after_s=0.25)

    with pytest.raises(openai.RateLimitError) as caught:
        ask(sdk)

    assert caught.value.response.headers["retry-after-ms"] == "250"
    assert caught.value.response.headers["retry-after"] == "1"
    assert simulator.stats()["rate_limited"] == 1


def test_server_error_fault_raises_internal_server_error(faulty: Any) -> None:
    simulator, sdk = faulty(rate_500=1.0)

    with pytest.raises(openai.InternalServerError):
        ask(sdk)
    assert simulator.stats()["server_error"] == 1


def test_timeout_fault_raises_api_timeout_error_and_stop_releases_the_hang(
    faulty: Any,
) -> None:
    simulator, sdk = faulty(client_timeout_s=0.5, rate_timeout=1.0, timeout_hang_s=3600)
    port = simulator.port

    with pytest.raises(openai.APITimeoutError):
        ask(sdk)
    simulator.stop()

    held = [t for t in threading.enumerate() if t.name.startswith(f"quiver-sim-{port}-")]
    assert held == []


def test_malformed_fault_makes_the_sdk_raise_json_decode_error(faulty: Any) -> None:
    simulator, sdk = faulty(rate_malformed=1.0)

    with pytest.raises(json.JSONDecodeError):
        ask(sdk)
    assert simulator.stats()["malformed"] == 1


def test_faults_do_not_change_the_content_of_a_retried_request(
    client: openai.OpenAI, faulty: Any
) -> None:
    _, sdk = faulty(rate_429=0.3, rate_500=0.3, rate_malformed=0.2, seed=7)
    failures, reply = 0, None
    while reply is None and failures < 20:
        try:
            reply = ask(sdk, "test-verdict", "retried")
        except (openai.APIStatusError, json.JSONDecodeError):
            failures += 1

    assert failures > 0, "the seeded fault stream is expected to fail the first attempt"
    assert reply is not None
    assert reply.model_dump() == ask(client, "test-verdict", "retried").model_dump()


def test_the_fault_stream_is_reproducible_from_its_seed(faulty: Any) -> None:
    def outcomes(sdk: openai.OpenAI) -> list[str]:
        seen = []
        for _ in range(30):
            try:
                ask(sdk)
                seen.append("ok")
            except openai.APIStatusError as exc:
                seen.append(str(exc.status_code))
        return seen

    _, first = faulty(rate_429=0.3, rate_500=0.3, seed=11)
    _, second = faulty(rate_429=0.3, rate_500=0.3, seed=11)

    seen = outcomes(first)
    assert seen == outcomes(second)
    assert {"ok", "429", "500"} <= set(seen)


def test_latency_counts_from_the_request_s_arrival_with_the_simulator_s_work_inside(faulty: Any) -> None:
    """A 0.5 s latency and a model that computes for 0.4 s: the answer comes about 0.5 s
    after the request, not 0.9 s (the latency does not add to the work); a fast model is
    never answered before its latency."""
    _, sdk = faulty(latency={"dist": "constant", "ms": 500})
    ask(sdk, model="test-close")  # the connection is open before the timed requests
    for model in ("test-slow", "test-close"):
        start = time.perf_counter()
        ask(sdk, model=model)
        elapsed = time.perf_counter() - start
        assert 0.5 <= elapsed < 0.85, (model, elapsed)


def test_fault_rates_must_be_probabilities_summing_to_at_most_one() -> None:
    with pytest.raises(pydantic.ValidationError, match="rate_500 must be a probability in"):
        FaultConfig(rate_500=1.5)
    with pytest.raises(pydantic.ValidationError, match="sum to 1.2; .* at most 1"):
        FaultConfig(rate_429=0.7, rate_timeout=0.5)
    with pytest.raises(pydantic.ValidationError, match="median of a lognormal"):
        LatencyConfig(dist="lognormal")
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        SimulatorConfig.model_validate({"fault": {}})


# --------------------------------------------------------------------------- refused requests


def test_unknown_model_is_not_found_and_lists_the_known_models(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="known models: .*sim-echo, sim-json"):
        ask(client, "gpt-17")


def test_a_streamed_answer_is_the_whole_answer_in_chunks(client: openai.OpenAI) -> None:
    whole = ask(client, key="k1", temperature=1.0)
    chunks = list(ask(client, key="k1", temperature=1.0, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and len(chunks) > 3
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == whole.usage.total_tokens


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"model": "sim-echo"}', "missing required parameter: 'messages'"),
        (b'{"model": "sim-echo", "messages": []}', "'messages' must not be empty"),
    ],
)
def test_a_body_without_json_or_messages_is_a_bad_request(
    sim: Simulator, body: bytes, message: str
) -> None:
    status, answer = post(f"{sim.url}/chat/completions", body)

    assert status == 400
    assert message in answer["error"]["message"]
    assert set(answer["error"]) == {"message", "type", "param", "code"}


# --------------------------------------------------------------------------- loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.com", "::"])
def test_check_loopback_refuses_other_addresses(host: str) -> None:
    with pytest.raises(SimulatorError, match=f"refuses to listen on '{host}'.*loopback only"):
        check_loopback(host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost"])
def test_check_loopback_accepts_loopback_addresses(host: str) -> None:
    check_loopback(host)


def test_simulator_refuses_to_start_on_a_public_address() -> None:
    with pytest.raises(SimulatorError, match="loopback only"):
        Simulator(SimulatorConfig(host="0.0.0.0")).start()


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback_available(), reason="no IPv6 loopback on this host")
def test_simulator_serves_ipv6_loopback() -> None:
    with Simulator(SimulatorConfig(host="::1")) as six:
        assert six.url == f"http://[::1]:{six.port}/v1"
        with openai.OpenAI(base_url=six.url, api_key="sk-test", max_retries=0) as sdk:
            assert ask(sdk, "sim-echo").choices[0].message.content.startswith("My billing")


# --------------------------------------------------------------------------- model modules


def test_a_model_module_named_in_the_config_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_model_module(tmp_path, "quiver_test_models_inproc", "test-plugged-inproc")
    monkeypatch.syspath_prepend(str(tmp_path))

    with Simulator(SimulatorConfig(models=["quiver_test_models_inproc"])) as plugged:
        with openai.OpenAI(base_url=plugged.url, api_key="sk-test", max_retries=0) as sdk:
            reply = ask(sdk, "test-plugged-inproc", temperature=0)

    assert json.loads(reply.choices[0].message.content) == {"label": "ham", "length": 42}


def test_a_model_module_that_cannot_be_imported_is_named_in_the_error() -> None:
    with pytest.raises(SimulatorError, match="'quiver_no_such_module'.*ModuleNotFoundError"):
        Simulator(SimulatorConfig(models=["quiver_no_such_module"])).start()


def test_simulator_process_serves_the_same_answers_and_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_model_module(tmp_path, "quiver_test_models_subproc", "test-plugged-subproc")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = SimulatorConfig(models=["quiver_test_models_subproc"])

    process = SimulatorProcess.start(config, pythonpath=[tmp_path])
    try:
        with openai.OpenAI(base_url=process.url, api_key="sk-test", max_retries=0) as sdk:
            remote = ask(sdk, "test-plugged-subproc", "k", logprobs=True, n=3)
        assert process.returncode is None
    finally:
        process.stop()
    with Simulator(config) as local:
        with openai.OpenAI(base_url=local.url, api_key="sk-test", max_retries=0) as sdk:
            here = ask(sdk, "test-plugged-subproc", "k", logprobs=True, n=3)

    assert process.returncode is not None
    assert remote.model_dump() == here.model_dump()


def test_simulator_process_that_dies_quotes_its_stderr() -> None:
    config = SimulatorConfig(models=["quiver_no_such_module"])

    expected = "(?s)exited with code 1.*stderr.*quiver_no_such_module"
    with pytest.raises(SimulatorError, match=expected):
        SimulatorProcess.start(config)


# --------------------------------------------------------------------------- pure functions


def test_complete_is_a_pure_function_of_request_and_key() -> None:
    request = SimRequest(model="test-close", messages=MESSAGES, sample_key="pure", n=4)

    assert complete(request) == complete(request)
    assert complete(request) != complete(SimRequest(model="test-close", messages=MESSAGES, n=4))
