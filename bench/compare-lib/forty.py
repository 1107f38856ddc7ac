"""The report of bench/compare step 12 (issue 12): 40 masters, no replicas,
GET 64 B from 64 sync threads, classic against rcpipe, interleaved.

  report.py forty OUT   (the markdown section on stdout)

Ratios are rcpipe / classic within one repetition. For ops/s higher is
better; for p50 and p99 lower is better, so the target "p99 >= 1.0x
classic" reads: rcpipe's p99 no worse than classic's, rcpipe / classic
<= 1.0."""

import report as R

STEP = 12


def ms(v):
    return R.fmt(v / 1e3 if v is not None else None, 2)


def span(sr, key, nd, scale=1.0):
    xs = [R.val(r, key) for r in sr]
    xs = [x / scale for x in xs if x is not None]
    if not xs:
        return "n/a"
    lo, hi = R.fmt(min(xs), nd), R.fmt(max(xs), nd)
    return lo if lo == hi else f"{lo}–{hi}"


def report(out):
    runs = R.load_runs(out)
    if not R.sel(runs, STEP):
        return ""
    p = ["### 12. 40 masters: 64 sync callers spread over 40 nodes\n"]
    groups = R.distinct(runs, STEP, "group")
    g = groups[0]
    cl, rc = R.sel(runs, STEP, g, "classic"), R.sel(runs, STEP, g, "rcpipe")
    masters = {R.val(r, "cluster_masters") for r in cl + rc} - {None}
    replicas = {R.val(r, "cluster_replicas") for r in cl + rc} - {None}
    p.append("A cluster of 40 masters without replicas (`tests/scripts/cluster.sh start "
             "--masters 40 --replicas 0 --node-timeout 15000`; the bench saw "
             f"{', '.join(str(int(x)) for x in sorted(masters)) or 'n/a'} master(s), "
             f"{', '.join(str(int(x)) for x in sorted(replicas)) or 'n/a'} replica(s)), "
             "keys 0..100000 preloaded with 64-byte values, GET 64 B from 64 sync threads, "
             "classic and rcpipe interleaved (order alternating). Ratios are rcpipe / "
             "classic per repetition: for ops/s higher is better, for latency lower is "
             "better. Server CPU is the masters' Δ CPU per command; commands per write "
             "is rcpipe's (classic writes one command per request). The step's "
             "`--key-maximum 100000` follows the suite's and wins. Commands:\n")
    p.append(R.commands(runs, STEP, 2) + "\n")
    rows = []
    for v, sr in (("classic", cl), ("rcpipe", rc)):
        if not sr:
            continue
        rows.append([v, R.fmt(R.mean_of(sr, "ops_per_sec"), 0), span(sr, "ops_per_sec", 0),
                     ms(R.mean_of(sr, "p50_us")), ms(R.mean_of(sr, "p99_us")),
                     span(sr, "p99_us", 2, 1e3),
                     R.fmt(R.mean_of(sr, "commands_per_write"), 2) if v == "rcpipe" else "1",
                     R.fmt(R.mean_of(sr, "server_cpu_us_per_op"), 1),
                     R.fmt(R.mean_of(sr, "client_cpu_us_per_op"), 1),
                     R.fmt(R.mean_of(sr, "errors"), 0)])
    p.append(R.table(["client", "ops/s (mean)", "ops/s (range)", "p50 ms", "p99 ms (mean)",
                      "p99 ms (range)", "cmds/write", "srv CPU µs/cmd", "cli CPU µs/req",
                      "errors"], rows) + "\n")
    by_rep = {}
    for r in cl + rc:
        by_rep.setdefault(r["rep"], {})[r["variant"]] = r
    rows, ops_r, p50_r, p99_r = [], [], [], []
    for rep in sorted(by_rep, key=int):
        a, b = by_rep[rep].get("rcpipe"), by_rep[rep].get("classic")
        if not a or not b or not a["data"] or not b["data"]:
            continue

        def q(key):
            x, y = R.val(a, key), R.val(b, key)
            return x / y if x is not None and y else None
        ro, r50, r99 = q("ops_per_sec"), q("p50_us"), q("p99_us")
        for lst, x in ((ops_r, ro), (p50_r, r50), (p99_r, r99)):
            if x is not None:
                lst.append(x)
        rows.append([rep, R.fmt(R.val(b, "ops_per_sec"), 0), R.fmt(R.val(a, "ops_per_sec"), 0),
                     R.fmt(ro, 2) + "×", ms(R.val(b, "p50_us")), ms(R.val(a, "p50_us")),
                     R.fmt(r50, 2) + "×", ms(R.val(b, "p99_us")), ms(R.val(a, "p99_us")),
                     R.fmt(r99, 2) + "×", R.fmt(R.val(a, "commands_per_write"), 2)])
    p.append(R.table(["rep", "classic ops/s", "rcpipe ops/s", "ops/s ratio",
                      "classic p50 ms", "rcpipe p50 ms", "p50 ratio", "classic p99 ms",
                      "rcpipe p99 ms", "p99 ratio", "rcpipe cmds/write"], rows) + "\n")
    if ops_r and p99_r:
        mo, mp = sum(ops_r) / len(ops_r), sum(p99_r) / len(p99_r)
        p.append("Issue 12's target at 40 masters, 64 threads, in this run:\n")
        p.append(f"- ops/s ≥ 1.0× classic: **{'met' if mo >= 1.0 else 'missed'}** "
                 f"(mean of the per-repetition ratios {mo:.2f}×, range "
                 f"{min(ops_r):.2f}–{max(ops_r):.2f}×, met in "
                 f"{sum(x >= 1.0 for x in ops_r)} of {len(ops_r)} repetitions)")
        p.append(f"- p99 no worse than classic (rcpipe / classic ≤ 1.0): "
                 f"**{'met' if mp <= 1.0 else 'missed'}** (mean {mp:.2f}×, range "
                 f"{min(p99_r):.2f}–{max(p99_r):.2f}×, met in "
                 f"{sum(x <= 1.0 for x in p99_r)} of {len(p99_r)} repetitions)")
        p.append("")
    return "\n".join(p)
