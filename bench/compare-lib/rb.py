#!/usr/bin/python3
"""One redis-benchmark GET run for bench/compare, with the server CPU per
command measured as rcp-bench measures it: INFO of every master before and
after, delta of used_cpu_user + used_cpu_sys over delta of
total_commands_processed, summed over the masters.

redis-benchmark has no time limit, only -n: a short calibration run first
gives its rate, and the measured run gets -n = rate x test time. Writes a
JSON object with the keys rcp-bench uses (client, ops_per_sec, p50_us,
p99_us, server_cpu_us_per_op, ...)."""

import argparse
import csv
import io
import json
import subprocess
import sys
import time


def info(port):
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "INFO"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    d = {}
    for line in out.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.strip().split(":", 1)
            d[k] = v
    return (float(d["used_cpu_user"]) + float(d["used_cpu_sys"]),
            int(d["total_commands_processed"]))


def bench(seed_port, pipeline, keyspace, size, n, clients, timeout):
    cmd = ["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(seed_port),
           "-t", "get", "-P", str(pipeline), "-r", str(keyspace), "-d", str(size),
           "-c", str(clients), "-n", str(n), "--csv"]
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    elapsed = time.monotonic() - t0
    # In cluster mode the CSV follows a few lines listing the masters.
    text = res.stdout[res.stdout.find('"test"'):] if '"test"' in res.stdout else ""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    head = rows[0] if rows else []
    for r in rows[1:]:
        if r[0].upper().startswith("GET"):
            return cmd, dict(zip(head, r)), elapsed
    raise RuntimeError("no GET line in redis-benchmark output:\n" + res.stdout + res.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", required=True)
    ap.add_argument("--ports", nargs="+", required=True, type=int)
    ap.add_argument("--pipeline", type=int, default=1)
    ap.add_argument("--keyspace", type=int, default=10000)
    ap.add_argument("--data-size", type=int, default=64)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--test-time", type=float, default=5)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    port = int(a.seed.rsplit(":", 1)[1])
    limit = a.test_time * 4 + 60

    _, cal, cal_s = bench(port, a.pipeline, a.keyspace, a.data_size,
                          20000 if a.pipeline == 1 else 100000, a.clients, limit)
    rate = float(cal["rps"])
    n = max(10000, int(rate * a.test_time))
    print(f"calibration: {rate:.0f} GET/s in {cal_s:.2f} s; measured run -n {n}")

    before = [info(p) for p in a.ports]
    cmd, row, elapsed = bench(port, a.pipeline, a.keyspace, a.data_size, n,
                              a.clients, limit)
    after = [info(p) for p in a.ports]
    cpu_us = sum(x[0] - y[0] for x, y in zip(after, before)) * 1e6
    cmds = sum(x[1] - y[1] for x, y in zip(after, before))
    print("command: " + " ".join(cmd))
    print(f"result: {row}")
    print(f"elapsed {elapsed:.2f} s; masters' CPU {cpu_us:.0f} us over {cmds} commands")
    res = {
        "client": "redis-benchmark",
        "mode": "redis-benchmark",
        "pipeline": a.pipeline,
        "clients": a.clients,
        "keyspace_per_master": a.keyspace,
        "requests": n,
        "elapsed_s": elapsed,
        "ops_per_sec": float(row["rps"]),
        "avg_us": float(row["avg_latency_ms"]) * 1000,
        "p50_us": float(row["p50_latency_ms"]) * 1000,
        "p99_us": float(row["p99_latency_ms"]) * 1000,
        "server_cpu_us_per_op": cpu_us / cmds if cmds else None,
        "errors": 0,
    }
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
