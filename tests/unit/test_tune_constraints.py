"""tune's constraint reasons: what each constraint was judged on, in words, so a failing trial
says why (qualify.pass names its failed rungs and the result file)."""

from hostctl.tune import plan as tplan
from hostctl.tune.runner import constraint_reason, text_report

QUALIFY = tplan.parse_constraint("qualify.pass", "t")
KV = tplan.parse_constraint("kv.full_context_requests>=2", "t")


def test_a_failed_ladder_names_each_failed_rung_and_the_result():
    results = {"qualify": {"pass": False, "result": "/r/q.json", "status": "failed",
                           "rungs": [{"name": "needle 25%", "pass": False, "detail": "reply '12'"},
                                     {"name": "boundary 2x(1,920+128)", "pass": True, "detail": "all complete"}]}}
    assert QUALIFY.check(results) is False
    reason = constraint_reason(QUALIFY, results, False)
    assert reason == "1 of 2 rung(s) failed: needle 25%: reply '12'; /r/q.json"


def test_a_passed_ladder_a_missing_verdict_and_a_number():
    ok = {"qualify": {"pass": True, "result": "/r/q.json", "rungs": [{"name": "a", "pass": True}]}}
    assert constraint_reason(QUALIFY, ok, True) == "every rung passed (1); /r/q.json"
    none = {"qualify": {"pass": None, "result": "/r/q.json", "status": "interrupted", "rungs": []}}
    assert QUALIFY.check(none) is None and "no verdict (status interrupted)" in constraint_reason(QUALIFY, none, None)
    assert constraint_reason(KV, {"kv": {"full_context_requests": 1.5}}, False) == "kv.full_context_requests = 1.5"
    assert constraint_reason(KV, {"kv": {}}, None) == "kv.full_context_requests was not measured"


def test_the_table_prints_the_reason_of_a_failed_constraint():
    doc = {"recipe": {"id": "r"}, "objective": "decode.median_tok_s", "constraints": ["qualify.pass"],
           "axes": [{"label": "--max-num-seqs"}], "boots": [], "winner": None, "boot_count": 1, "out_dir": "/o",
           "trials": [{"id": "t1", "knobs": {"--max-num-seqs": 2}, "objective": 50.0, "status": "ok", "valid": False,
                       "constraints": {"qualify.pass": False},
                       "constraint_reasons": {"qualify.pass": "1 of 4 rung(s) failed: needle 25%: x; /q.json"}}]}
    out = text_report(doc)
    assert "  t1 qualify.pass: FAIL: 1 of 4 rung(s) failed: needle 25%: x; /q.json" in out
    assert "no trial met every constraint: no winner" in out
