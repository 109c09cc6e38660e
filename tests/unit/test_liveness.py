"""Reading the engine's progress (hostctl/service/liveness.py): vLLM's /metrics through
prometheus_client's parser, and the cause a frozen engine is given. The verdicts over time are
tests/unit/data/supervise.yaml's (test_supervise.py)."""

from __future__ import annotations

import http.server
import threading
import time

from hostctl.failures import StartEvidence
from hostctl.service import liveness
from hostctl.service.supervise import Verdict, death_finding

# The shapes vLLM 0.32 exposes (two engines of one model here): gauges per engine, counters as
# <name>_total with their _created, the per-step histogram's _count.
METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="demo"} 2.0
vllm:num_requests_running{engine="1",model_name="demo"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="demo"} 3.0
vllm:num_requests_waiting{engine="1",model_name="demo"} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="demo"} 120.0
vllm:generation_tokens_total{engine="1",model_name="demo"} 30.0
vllm:generation_tokens_created{engine="0",model_name="demo"} 1.7649e+09
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="demo"} 400.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="demo"} 4.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="demo"} 1.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="demo"} 3.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="demo"} 9.0
vllm:iteration_tokens_total_count{engine="0",model_name="demo"} 9.0
vllm:iteration_tokens_total_sum{engine="0",model_name="demo"} 520.0
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 88.5
"""


def test_the_counters_are_summed_over_engines_and_labels():
    c = liveness.parse_metrics(METRICS)
    assert c is not None
    assert (c.running, c.waiting) == (3.0, 3.0) and c.in_flight
    # generation 150 + prompt 400 + requests 5 + steps 9: the _created timestamps and the
    # process's own counters are not work
    assert c.work == 564.0


def test_a_server_without_vllms_metrics_has_no_counters():
    assert liveness.parse_metrics("# TYPE up gauge\nup 1\n") is None
    assert liveness.parse_metrics("") is None


def test_an_idle_engine_is_not_in_flight():
    idle = METRICS.replace('model_name="demo"} 2.0', 'model_name="demo"} 0.0').replace(
        'model_name="demo"} 1.0\n# HELP vllm:num_requests_waiting', 'model_name="demo"} 0.0\n# HELP vllm:num_requests_waiting'
    ).replace('vllm:num_requests_waiting{engine="0",model_name="demo"} 3.0', 'vllm:num_requests_waiting{engine="0",model_name="demo"} 0.0')
    c = liveness.parse_metrics(idle)
    assert c is not None and not c.in_flight


def test_a_frozen_engine_is_named_with_its_last_counters():
    v = Verdict(action="hung", evidence="progress", failing_s=21.0, status="running",
                counters=liveness.EngineCounters(running=2, waiting=1, work=150), last_progress="the engine's counters moved")
    cause, also = death_finding(v, StartEvidence(log="INFO serving"), 20)
    assert cause.id == "engine-frozen" and not also
    assert "21 s" in cause.title and "/health" in cause.title
    assert "running 2, waiting 1, work counter 150" in cause.lines[1]
    assert "the engine's counters moved, 21.0 s before" in cause.lines[2]


def test_a_runtime_that_answers_nothing_stays_a_runtime_hang():
    cause, _ = death_finding(Verdict(action="hung", evidence="health", failing_s=7.0, status="paused"),
                             StartEvidence(log=""), 6)
    assert cause.id == "runtime-hang"


class _Metrics:
    """A loopback /metrics that answers the first `answered` GETs with METRICS and holds every later
    one past the client's timeout (a loaded API server's /metrics)."""

    def __init__(self, answered: int) -> None:
        served = [0]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served[0] += 1
                if served[0] > answered:
                    time.sleep(2.5)
                body = METRICS.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.served = served
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> _Metrics:
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_status_calls_a_busy_engine_stalled_only_on_a_reading_that_did_not_move():
    # hang_timeout_s 2: status watches the counters for 1 s, each read bounded by that
    with _Metrics(answered=10**6) as m:
        check = liveness.check_once(m.endpoint, "demo", None, 2)
    assert check.working is False and "did not move in 1 s" in check.why, check
    assert check.counters is not None and check.counters.in_flight


def test_status_judges_nothing_when_metrics_answers_once_and_then_not_in_time():
    with _Metrics(answered=1) as m:
        check = liveness.check_once(m.endpoint, "demo", None, 2)
        assert m.served[0] >= 2  # it did ask again
    assert check.working is None and "not read again in 1 s" in check.why, check
