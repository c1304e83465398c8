"""The OpenAI-compatible endpoint agent against small faulty servers on 127.0.0.1: retries with backoff on
429 and 500, timeouts, failures recorded per episode without stopping an evaluation, the API key sent but
never shown, usage and latency in the trajectory, and bounded concurrency across tasks."""
from __future__ import annotations

import json
import logging
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest

pytest.importorskip("openai", reason="the openai extra is not installed (pip install 'seed-gym[openai]')")

import seed_envs  # noqa: E402,F401  (registers the ids)
from seed_agents.cli import main as seed_envs_main  # noqa: E402
from seed_agents.openai_endpoint import EndpointError, OpenAIChatAgent, import_openai, resolve_api_key  # noqa: E402
from seed_agents.runner import play_panel  # noqa: E402
from wrappers import ServedResponse, Step, Trajectory, TrajectoryRecorder, TrajectoryWriter, read_trajectories  # noqa: E402
from wrappers.stack import make_agent_env  # noqa: E402
from wrappers.trajectory import encode_record  # noqa: E402
from wrappers.viewer import write_viewer  # noqa: E402

ENV = "seed/EZPoints-v0"
SECRET = "sk-test-0123456789abcdef-secret"
HANG = "hang"


def raw(body: bytes | str, content_type: str = "application/json", status: int = 200) -> tuple:
    """A script entry answering ``body`` as it is (no completion built around it)."""
    return ("raw", status, content_type, body.encode() if isinstance(body, str) else body)


def drip(interval: float) -> tuple:
    """A script entry sending a whole valid reply, status line and headers included, one byte per ``interval``."""
    return ("drip", interval)


class ScriptedServer:
    """A chat-completions server on 127.0.0.1 that answers from a script, then 200s.

    Each request takes the next script entry: ``(status, headers)`` answers that status with an error body,
    ``HANG`` sends nothing until the server closes. After the script every request gets a completion of
    ``reply`` (after ``delay`` seconds). It records each request (arrival time, Authorization, JSON body)
    and the most requests it had in flight at once.
    """

    def __init__(self, script=(), reply="<action>3</action>", delay=0.0):
        self.script, self.reply, self.delay = list(script), reply, delay
        self.requests: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self._lock, self._release = threading.Lock(), threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"t": time.monotonic(), "path": self.path, "body": body,
                                            "authorization": self.headers.get("Authorization")})
                    answer = server.script.pop(0) if server.script else None
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                self._counted = True
                try:
                    if answer == HANG:
                        server._release.wait(30)
                        return
                    if isinstance(answer, tuple) and answer[0] == "raw":
                        _, status, content_type, data = answer
                        self._answered()
                        self.send_response(status)
                        self.send_header("Content-Type", content_type)
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    if isinstance(answer, tuple) and answer[0] == "drip":
                        data = json.dumps(completion(server.reply, body)).encode()
                        reply = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
                        self.close_connection = True
                        for k in range(len(reply)):
                            if server._release.wait(answer[1]):
                                return
                            self.wfile.write(reply[k:k + 1])
                            self.wfile.flush()
                        return
                    if answer is not None:
                        status, headers = answer
                        return self._send(status, {"error": {"message": f"scripted {status}", "type": "test"}}, headers)
                    time.sleep(server.delay)
                    self._send(200, completion(server.reply, body))
                finally:
                    self._answered()

            def _answered(self):
                """A request stops counting as in flight *before* its answer is written: once the client has
                the answer it may send its next request at once, before this thread would run again."""
                with server._lock:
                    if self._counted:
                        self._counted = False
                        server.in_flight -= 1

            def _send(self, status, payload, headers=None):
                self._answered()
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(text: str, request: dict) -> dict:
    prompt_tokens = sum(len(m["content"].split()) for m in request["messages"])
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": request["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 3, "total_tokens": prompt_tokens + 3}}


def panel(n: int) -> tuple[str, ...]:
    return gym.make(ENV, split="unseen").unwrapped.task_ids()[:n]


def gaps(server: ScriptedServer) -> list[float]:
    times = [r["t"] for r in server.requests]
    return [b - a for a, b in zip(times, times[1:])]


# ------------------------------------------------------------------------------------ retries, backoff, timeouts
def test_429_is_retried_after_the_servers_retry_after():
    with ScriptedServer([(429, {"Retry-After": "0.4"})]) as server:
        reply = OpenAIChatAgent(server.base_url, "m", max_retries=2, timeout=10).act("hello")
    assert str(reply) == "<action>3</action>" and isinstance(reply, ServedResponse)
    assert len(server.requests) == 2 and reply.usage["retries"] == 1
    assert gaps(server)[0] >= 0.4  # the client waited as the server asked


def test_500_is_retried_with_exponential_backoff():
    with ScriptedServer([(500, {}), (503, {})]) as server:
        reply = OpenAIChatAgent(server.base_url, "m", max_retries=3, timeout=10).act("hello")
    assert str(reply) == "<action>3</action>" and len(server.requests) == 3 and reply.usage["retries"] == 2
    first, second = gaps(server)
    # openai's backoff: 0.5 s * 2**n, less up to 25% jitter: at least 0.375 s, then at least 0.75 s.
    assert first >= 0.375 and second >= 0.75
    assert reply.usage["latency_s"] >= first + second  # latency covers the whole call, retries included


def test_an_endpoint_still_failing_after_its_retries_is_a_clear_error():
    with ScriptedServer([(500, {})] * 5) as server:
        agent = OpenAIChatAgent(server.base_url, "m", max_retries=1, timeout=10)
        with pytest.raises(EndpointError, match=r"failed after 2 attempts \(1 retry spent\): HTTP 500"):
            agent.act("hello")
    assert len(server.requests) == 2


def test_a_hanging_endpoint_times_out_and_is_retried():
    with ScriptedServer([HANG, HANG, HANG]) as server:
        agent = OpenAIChatAgent(server.base_url, "m", max_retries=1, timeout=0.3)
        start = time.monotonic()
        with pytest.raises(EndpointError, match="Timeout"):
            agent.act("hello")
        elapsed = time.monotonic() - start
    assert len(server.requests) == 2 and 0.6 <= elapsed < 10


def test_a_failing_endpoint_ends_only_its_episode_and_every_episode_is_written(tmp_path):
    """The first task's endpoint call hangs past the timeout; the evaluation records that episode as a
    failure with the error, plays the other tasks, and the file holds all of them."""
    out = tmp_path / "ez.jsonl"
    with ScriptedServer([HANG]) as server:
        agent = OpenAIChatAgent(server.base_url, "m", max_retries=0, timeout=0.3)
        with TrajectoryWriter(out) as writer:
            results = play_panel(
                lambda: TrajectoryRecorder(make_agent_env(ENV, split="unseen"), sink=writer, env_id=ENV),
                lambda env: agent, panel(3), seeds=[0, 1, 2])
    assert [r.error is not None for r in results] == [True, False, False]
    assert "step 0" in results[0].error and "Timeout" in results[0].error and not results[0].success
    trajectories = list(read_trajectories(out))
    assert len(trajectories) == 3
    failed = trajectories[0]
    assert failed.meta["ended_by"] == "error" and "Timeout" in failed.meta["error"] and failed.steps == []
    assert not failed.success and failed.score == 0.0
    for t in trajectories[1:]:
        assert t.steps and all(s.usage["completion_tokens"] == 3 and s.usage["latency_s"] > 0 for s in t.steps)
        assert all(s.response == "<action>3</action>" for s in t.steps)
    page = write_viewer([out], tmp_path / "view.html").read_text()
    assert '"completion_tokens": 3' in page or '"completion_tokens":3' in page  # the viewer shows usage
    assert "Timeout" in page  # and the failed episode's error (its meta)


# ------------------------------------------------------------------------------------ misbehaving servers
def test_a_server_that_drips_its_reply_is_cut_at_the_attempts_total_deadline():
    """One byte every 50 ms: each read returns well within the timeout, the whole reply would take ~15 s."""
    with ScriptedServer([drip(0.05), drip(0.05)]) as server:
        agent = OpenAIChatAgent(server.base_url, "m", max_retries=1, timeout=0.5)
        start = time.monotonic()
        with pytest.raises(EndpointError, match=r"failed after 2 attempts .*Timeout: no complete reply within 0.5 s"):
            agent.act("hello")
        elapsed = time.monotonic() - start
    assert len(server.requests) == 2 and 1.0 <= elapsed < 4.0


HTML = "<html><body><h1>502 Bad Gateway</h1></body></html>"
UNUSABLE = {  # reply body (as served with status 200) -> what the error must say
    "html": (raw(HTML, "text/html"), "not JSON"),
    "invalid json": (raw('{"choices": [{"message": '), "not JSON"),
    "json array": (raw("[1, 2, 3]"), "a JSON list"),
    "choices a string": (raw('{"choices": "abc"}'), "'choices' is a str"),
    "no choices": (raw('{"choices": []}'), "'choices' is a list"),
    "message null": (raw('{"choices": [{"message": null}]}'), "message is missing or null"),
    "content null": (raw('{"choices": [{"message": {"content": null}}]}'), "content is missing or null"),
    "tool calls": (raw('{"choices": [{"message": {"content": null, "tool_calls": [{"id": "1"}]}}]}'), "tool calls"),
    "content a number": (raw('{"choices": [{"message": {"content": 3}}]}'), "content is a int"),
}


@pytest.mark.parametrize("name", sorted(UNUSABLE))
def test_an_unusable_reply_is_retried_then_recorded_as_the_calls_failure(name):
    entry, says = UNUSABLE[name]
    with ScriptedServer([entry]) as server:  # the retry gets a good reply
        reply = OpenAIChatAgent(server.base_url, "m", max_retries=1, timeout=10).act("hello")
    assert str(reply) == "<action>3</action>" and reply.usage["retries"] == 1 and len(server.requests) == 2
    with ScriptedServer([entry, entry]) as server:
        with pytest.raises(EndpointError, match="failed after 2 attempts") as caught:
            OpenAIChatAgent(server.base_url, "m", max_retries=1, timeout=10).act("hello")
    assert f"unusable reply: {says}" in str(caught.value) or says in str(caught.value)


def test_a_reply_over_the_size_cap_is_refused_not_stored():
    huge = json.dumps({"choices": [{"message": {"content": "x" * 3_000_000}}]})
    with ScriptedServer([raw(huge)]) as server:
        agent = OpenAIChatAgent(server.base_url, "m", max_retries=0, timeout=10)
        with pytest.raises(EndpointError, match=r"unusable reply: reply larger than 1048576 bytes"):
            agent.act("hello")
    with ScriptedServer([raw(huge)]) as server:
        reply = OpenAIChatAgent(server.base_url, "m", max_retries=1, timeout=10).act("hello")
    assert str(reply) == "<action>3</action>"


def test_usage_that_is_not_a_count_is_recorded_as_none():
    body = json.dumps({"model": ["not", "a", "name"], "choices": [{"message": {"content": "<action>1</action>"},
                                                                  "finish_reason": 7}],
                       "usage": {"prompt_tokens": "many", "completion_tokens": -3}})
    with ScriptedServer([raw(body)]) as server:
        reply = OpenAIChatAgent(server.base_url, "m", max_retries=0, timeout=10).act("hello")
    assert str(reply) == "<action>1</action>"
    assert {k: reply.usage[k] for k in ("prompt_tokens", "completion_tokens", "finish_reason", "model")} == dict.fromkeys(
        ("prompt_tokens", "completion_tokens", "finish_reason", "model"))


def test_a_client_error_and_an_over_long_retry_after_say_that_no_retry_ran():
    with ScriptedServer([(400, {})]) as server:
        with pytest.raises(EndpointError, match=r"failed after 1 attempt \(not retried: HTTP 400 is a client error\)"):
            OpenAIChatAgent(server.base_url, "m", max_retries=2, timeout=10).act("hello")
    assert len(server.requests) == 1
    with ScriptedServer([(429, {"Retry-After": "300"})]) as server:
        with pytest.raises(EndpointError, match=r"failed after 1 attempt \(not retried: the server asked to wait 300 s"):
            OpenAIChatAgent(server.base_url, "m", max_retries=2, timeout=10).act("hello")
    assert len(server.requests) == 1


def test_seed_eval_with_a_gateway_page_on_every_fifth_request_plays_and_reports_every_episode(tmp_path, capsys):
    """The issue's reproduction: an HTML page on every 5th request used to stop the evaluation with 5 of 8
    episodes written and no report."""
    pytest.importorskip("torch", reason="seed-eval is the trainer's command (the train extra)")
    from seed_train.cli import main_eval

    script = [raw(HTML, "text/html") if k % 5 == 4 else None for k in range(200)]
    out = tmp_path / "eval"
    with ScriptedServer(script) as server:
        assert main_eval(["--endpoint", server.base_url, "--model", "served", "--env", ENV, "--split", "unseen",
                          "--limit", "8", "--concurrency", "4", "--max-retries", "1", "--out", str(out)]) == 0
    summary = json.loads((out / "eval_seed0.json").read_text())
    trajectories = list(read_trajectories(out / "seed0.trajectories.jsonl"))
    assert summary["categories"]["all"]["episodes"] == 8 and len(trajectories) == 8
    # (with 4 workers a call's retry may land on another 5th request: then that episode is a recorded failure)
    assert summary["meta"]["errors"] == sum("error" in t.meta for t in trajectories)
    assert all("unusable reply: not JSON" in t.meta["error"] for t in trajectories if "error" in t.meta)
    html_served = sum(1 for entry in script[:len(server.requests)] if entry is not None)
    retried = sum(s.usage["retries"] for t in trajectories for s in t.steps)
    assert html_served >= 1 and retried + 2 * summary["meta"]["errors"] == html_served


@pytest.mark.parametrize("command", ["seed-envs", "seed-eval"])
def test_ctrl_c_ends_the_process_at_once_at_any_concurrency_and_keeps_ended_episodes(tmp_path, command):
    """Two workers wait on a hung endpoint (30 s timeout); SIGINT ends the process within seconds (130), and
    the episodes that ended before are in the file, whole."""
    import signal
    import subprocess

    if command == "seed-eval":
        pytest.importorskip("torch", reason="seed-eval is the trainer's command (the train extra)")
    steps_before_hang = 24  # EZPoints unseen episodes of the scripted reply take 4-8 steps
    with ScriptedServer([None] * steps_before_hang + [HANG] * 50) as server:
        if command == "seed-envs":
            out = tmp_path / "rec.jsonl"
            args = [sys.executable, "-m", "seed_agents", "record", ENV, "--split", "unseen", "--episodes", "6",
                    "--out", str(out)]
        else:
            out = tmp_path / "eval" / "seed0.trajectories.jsonl"
            args = [sys.executable, "-c", "import sys; from seed_train.cli import main_eval; sys.exit(main_eval())", "--env", ENV, "--split", "unseen", "--limit", "6",
                    "--model", "m", "--endpoint", server.base_url, "--out", str(tmp_path / "eval")]
        if command == "seed-envs":
            args += ["--agent", "openai", "--base-url", server.base_url, "--model", "m"]
        args += ["--concurrency", "2", "--timeout", "30", "--max-retries", "0"]
        # Output to files, not pipes: a child whose pipe filled before anyone read it would block on a write.
        log = (tmp_path / "child.log").open("w")
        # A terminal's Ctrl-C reaches a process whose SIGINT is at its default. Where pytest itself runs with
        # SIGINT ignored (a background job of a non-interactive shell, as CI may start it), a child would
        # inherit the ignore across exec and Python would install no KeyboardInterrupt. A handled signal is
        # reset to its default at exec, so handle it here while the child starts.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True)
        finally:
            signal.signal(signal.SIGINT, previous)
        deadline = time.monotonic() + 60
        while len(server.requests) < steps_before_hang + 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # both workers are now inside a hung call
        assert len(server.requests) >= steps_before_hang + 2
        time.sleep(0.3)
        start = time.monotonic()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError("the process did not end within 15 s of SIGINT; its output ends: "
                                 + (tmp_path / "child.log").read_text()[-2000:])
        finally:
            log.close()
        elapsed = time.monotonic() - start
        err = (tmp_path / "child.log").read_text()
    assert process.returncode == 130 and elapsed < 10, err
    assert "interrupted" in err and "Traceback" not in err
    ended = list(read_trajectories(out))
    assert 1 <= len(ended) < 6 and all(t.steps for t in ended)


# ------------------------------------------------------------------------------------ API key
def test_the_api_key_is_sent_but_never_printed_logged_or_recorded(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setenv("SEED_TEST_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)  # openai and httpx log requests at debug level
    out = tmp_path / "rec.jsonl"
    with ScriptedServer([(429, {"Retry-After": "0.1"})]) as server:
        assert seed_envs_main(["record", ENV, "--split", "unseen", "--episodes", "2", "--out", str(out),
                               "--agent", "openai", "--base-url", server.base_url, "--model", "m",
                               "--api-key-env", "SEED_TEST_API_KEY"]) == 0
        agent = OpenAIChatAgent(server.base_url, "m", api_key_env="SEED_TEST_API_KEY")
    assert {r["authorization"] for r in server.requests} == {f"Bearer {SECRET}"}
    shown = capsys.readouterr()
    assert caplog.records  # the check below looked at real log output
    for text in (shown.out, shown.err, caplog.text, out.read_text(), repr(agent)):
        assert SECRET not in text


def test_a_named_key_variable_that_is_unset_is_an_error_and_the_default_is_optional(monkeypatch):
    monkeypatch.delenv("SEED_TEST_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="SEED_TEST_API_KEY is not set"):
        resolve_api_key("SEED_TEST_API_KEY")
    assert resolve_api_key(None) == "EMPTY"
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert resolve_api_key(None) == SECRET


def test_without_the_openai_package_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'seed-gym\[openai\]'"):
        import_openai()


# ------------------------------------------------------------------------------------ request, trajectory format
def test_the_request_carries_the_envs_prompt_and_the_sampling_settings():
    env = make_agent_env(ENV, split="unseen")
    obs, info = env.reset(seed=0, options={"task_id": panel(1)[0]})
    with ScriptedServer() as server:
        OpenAIChatAgent(server.base_url, "served-name", temperature=0.7, seed=5, max_tokens=17,
                        system_prompt="be brief")(obs, info)
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": obs["prompt"]}]
    assert (body["model"], body["temperature"], body["seed"], body["max_tokens"]) == ("served-name", 0.7, 5, 17)


def test_usage_round_trips_and_steps_without_it_keep_their_bytes():
    step = Step(index=0, observation="o", action="a", reward=1.0)
    plain = Trajectory(episode_id="e", env_id=None, task_id="t", task="", category="", split="", steps=[step])
    assert b'"usage"' not in encode_record(plain.to_dict())  # files of local policies are unchanged
    usage = {"prompt_tokens": 11, "completion_tokens": 3, "latency_s": 0.25, "retries": 0}
    served = Trajectory(**{**plain.__dict__, "steps": [Step(**{**step.__dict__, "usage": usage})]})
    back = Trajectory.from_dict(json.loads(encode_record(served.to_dict())))
    assert back.steps[0].usage == usage
    assert Trajectory.from_dict(json.loads(encode_record(plain.to_dict()))).steps[0].usage is None


def test_a_served_response_pickles_with_its_usage():
    import pickle

    r = pickle.loads(pickle.dumps(ServedResponse("x", {"prompt_tokens": 1})))
    assert isinstance(r, ServedResponse) and r == "x" and r.usage == {"prompt_tokens": 1}


# ------------------------------------------------------------------------------------ concurrency, CLIs
def test_concurrency_plays_tasks_at_once_up_to_the_bound_and_keeps_panel_order():
    tasks = panel(8)
    with ScriptedServer(delay=0.05) as server:
        agent = OpenAIChatAgent(server.base_url, "m")
        results = play_panel(lambda: make_agent_env(ENV, split="unseen"), lambda env: agent, tasks, concurrency=3)
    assert [r.task_id for r in results] == list(tasks)
    assert server.max_in_flight == 3  # (8 episodes of several 50 ms calls: the three workers overlap)


def test_expert_results_do_not_depend_on_concurrency():
    tasks = panel(12)
    runs = [play_panel(lambda: gym.make(ENV, split="unseen"), seed_envs.make_expert, tasks, concurrency=c)
            for c in (1, 4)]
    assert runs[0] == runs[1] and all(r.success for r in runs[0])


def test_seed_envs_eval_with_an_endpoint_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "eval.json"
    with ScriptedServer() as server:
        assert seed_envs_main(["eval", ENV, "--split", "unseen", "--limit", "4", "--agent", "openai",
                               "--base-url", server.base_url, "--model", "m", "--concurrency", "2",
                               "--json", str(out)]) == 0
    assert "agent=openai tasks=4" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["summary"]["all"]["episodes"] == 4 and result["summary"]["all"]["success"] == 0.0
    assert all(e["error"] is None for e in result["episodes"])


def test_agent_openai_without_url_or_model_is_a_clear_error(capsys):
    assert seed_envs_main(["eval", ENV, "--split", "unseen", "--agent", "openai", "--model", "m"]) == 2
    assert "--base-url" in capsys.readouterr().err


def test_seed_eval_endpoint_writes_the_same_reports_as_a_local_evaluation(tmp_path, capsys):
    pytest.importorskip("torch", reason="seed-eval is the trainer's command (the train extra)")
    from seed_train.cli import main_eval

    out = tmp_path / "eval"
    with ScriptedServer([(500, {})]) as server:
        assert main_eval(["--endpoint", server.base_url, "--model", "served", "--env", ENV, "--split", "unseen",
                          "--limit", "4", "--concurrency", "2", "--out", str(out)]) == 0
    summary = json.loads((out / "eval_seed0.json").read_text())
    assert summary["categories"]["all"]["episodes"] == 4 and summary["meta"]["errors"] == 0
    assert summary["meta"]["endpoint"] == server.base_url and summary["meta"]["generated_tokens"] > 0
    assert (out / "eval_seed0.md").is_file() and (out / "eval_seed0.png").is_file()
    trajectories = list(read_trajectories(out / "seed0.trajectories.jsonl"))
    assert sorted(t.seed for t in trajectories) == [0, 1, 2, 3]  # the panel index is the reset seed
    assert all(s.usage for t in trajectories for s in t.steps)
    assert "served at" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ tool-call actions
def tool_reply(name: str, arguments: str = "{}") -> tuple:
    return raw(json.dumps({"model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2}}))


def test_the_endpoint_agent_offers_the_envs_verbs_as_tools_and_returns_the_call():
    from wrappers.stack import default_tools
    from wrappers.tools import tool_schemas

    tools = tool_schemas(default_tools("seed/WebShop-v0"))
    with ScriptedServer([tool_reply("click", '{"target": "buy now"}')]) as server:
        reply = OpenAIChatAgent(server.base_url, "m", tools=tools).act("hello")
    assert json.loads(str(reply)) == {"name": "click", "arguments": {"target": "buy now"}}
    sent = server.requests[0]["body"]["tools"]
    assert [t["function"]["name"] for t in sent] == ["search", "click"]
    assert sent[1]["function"]["parameters"]["required"] == ["target"]


def test_seed_envs_plays_sokoban_by_tool_calls_and_a_missing_or_bad_call_is_a_format_error(tmp_path):
    out = tmp_path / "tools.jsonl"
    script = [raw(json.dumps(completion("I would go up.", {"model": "m", "messages": []}))),
              tool_reply("jump"), tool_reply("up", '{"steps": "2"}'), tool_reply("left")]
    with ScriptedServer(script) as server:
        assert seed_envs_main(["record", "seed/Sokoban-v0", "--split", "test", "--episodes", "1", "--max-steps", "4",
                               "--agent", "openai", "--base-url", server.base_url, "--model", "m",
                               "--action-format", "tools", "--out", str(out)]) == 0
    assert [t["function"]["name"] for t in server.requests[0]["body"]["tools"]] == ["up", "down", "left", "right"]
    [episode] = list(read_trajectories(out))
    steps = episode.steps
    assert steps[0].format_error and "no tool call" in steps[0].info["format_error_reason"]
    assert steps[1].format_error and "unknown tool 'jump'" in steps[1].info["format_error_reason"]
    assert steps[2].format_error and "unexpected ['steps']" in steps[2].info["format_error_reason"]
    assert steps[3].action == "left" and not steps[3].format_error
    assert "Act by calling exactly one of the tools." in steps[0].prompt
