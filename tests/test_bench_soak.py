"""The soak benchmark at a tiny count: both servers as real processes on 127.0.0.1, concurrent
clients, hostile requests refused with a 4xx, no errors, the servers healthy afterwards."""

import json

from ragjax.bench.soak import main


def test_soak_serves_good_requests_and_refuses_hostile_ones(capsys):
  rc = main(["--retrieve-requests", "60", "--chat-requests", "10", "--clients", "4",
             "--hostile-every", "5", "--chat-max-tokens", "4"])
  rows = [json.loads(l) for l in capsys.readouterr().out.strip().splitlines()]
  assert rc == 0 and len(rows) == 2
  for r, n in zip(rows, (60, 10)):
    assert r["errors"] == 0, r["first_errors"]
    assert r["refused_as_expected"] == n // 5 and r["served"] == n - n // 5
    assert r["healthy_after"] and r["p99_ms"] >= r["p50_ms"] > 0
