#!/usr/bin/python3
"""Tables, plot data and the docs block of bench/compare.

  report.py mean OUT STEP GROUP VARIANT KEY   mean of KEY over the ok runs
  report.py report OUT                        markdown report on stdout; plot
                                              data files written into OUT
  report.py write-docs OUT PERF_MD            replace the compare block
  report.py forty OUT                         step 12's section on stdout

OUT/runs.tsv has one line per run: step, group, variant, rep, status,
base path (BASE.json, BASE.txt, ...), command."""

import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys

BEGIN = "<!-- compare:begin -->"
END = "<!-- compare:end -->"


# ---- loading ---------------------------------------------------------------

def load_runs(out):
    runs = []
    try:
        with open(os.path.join(out, "runs.tsv")) as f:
            lines = f.read().splitlines()
    except OSError:
        return runs
    for line in lines:
        p = line.split("\t")
        if len(p) < 7:
            continue
        r = dict(step=p[0], group=p[1], variant=p[2], rep=p[3], status=p[4],
                 base=p[5], cmd=p[6], data=None)
        if r["status"] == "ok":
            try:
                with open(r["base"] + ".json") as jf:
                    r["data"] = json.load(jf)
            except (OSError, ValueError):
                r["data"] = None
        runs.append(r)
    return runs


def sel(runs, step, group=None, variant=None):
    return [r for r in runs if r["step"] == str(step)
            and (group is None or r["group"] == group)
            and (variant is None or r["variant"] == variant)]


def distinct(runs, step, field, prefix=""):
    """The values of FIELD in the runs of STEP, in run order, once each."""
    seen = []
    for r in sel(runs, step):
        if r[field].startswith(prefix) and r[field] not in seen:
            seen.append(r[field])
    return seen


def val(run, key):
    d = run.get("data")
    if not d:
        return None
    v = d.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def mean_of(runs, key):
    xs = [val(r, key) for r in runs]
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else None


def m(runs, step, group, variant, key):
    return mean_of(sel(runs, step, group, variant), key)


def per_rep_ratios(runs, step, group, num, den, key, den_step=None, den_group=None):
    a = {r["rep"]: val(r, key) for r in sel(runs, step, group, num)}
    b = {r["rep"]: val(r, key) for r in sel(runs, den_step or step, den_group or group, den)}
    return [a[k] / b[k] for k in a if k in b and a[k] is not None and b[k]]


# ---- formatting ------------------------------------------------------------

def fmt(v, nd=1):
    if v is None:
        return "n/a"
    s = f"{v:,.{nd}f}"
    return s[1:] if s.startswith("-") and not s.strip("-0.,") else s


def ratio(num, den, reps=None):
    if num is None or den is None or den == 0:
        return "n/a"
    s = f"{num / den:.2f}×"
    if reps and len(reps) > 1:
        s += f" ({min(reps):.2f}–{max(reps):.2f})"
    return s


def table(cols, rows):
    out = ["| " + " | ".join(cols) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def commands(runs, step, limit=4):
    """The exact commands of the first repetition of the first few variants."""
    seen, lines = set(), []
    for r in sel(runs, step):
        if r["step"] not in ("5", "8") and r["rep"] != "1":
            continue
        key = (r["group"], r["variant"])
        if key in seen or len(lines) >= limit:
            continue
        seen.add(key)
        lines.append("    " + shorten(r["cmd"]))
    return "\n".join(lines)


def shorten(cmd):
    """Temporary paths out of a command line, so the docs read well."""
    cmd = re.sub(r"\S*/(rcp-bench)\b", r"build/bench/\1", cmd)
    cmd = re.sub(r"(perf stat -x, -o)\s*\S+", r"\1 FILE", cmd)
    cmd = re.sub(r"(--json-out-file|--callgrind-out-file=|--log-file=)\s*\S+",
                 lambda mo: mo.group(1) + ("" if mo.group(1).endswith("=") else " ") + "FILE",
                 cmd)
    return cmd


def settings(out):
    s = {}
    try:
        with open(os.path.join(out, "settings.env")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    s[k] = v
    except OSError:
        pass
    return s


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        rv = subprocess.run(["redis-server", "--version"], capture_output=True,
                            text=True, timeout=10).stdout
        rv = re.search(r"v=(\S+)", rv).group(1)
    except (OSError, subprocess.SubprocessError, AttributeError):
        rv = "unknown"
    return (f"{os.cpu_count()} CPUs ({model}), {platform.system()} {platform.release()}, "
            f"redis-server {rv}, {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}")


# ---- the steps -------------------------------------------------------------

def pair_cells(runs, step, g):
    """ops/s and server CPU of classic and rcpipe in one comparison, with
    the rcpipe/classic ratios: the shared columns of steps 1 and 4."""
    c_ops, p_ops = m(runs, step, g, "classic", "ops_per_sec"), m(runs, step, g, "rcpipe", "ops_per_sec")
    c_cpu = m(runs, step, g, "classic", "server_cpu_us_per_op")
    p_cpu = m(runs, step, g, "rcpipe", "server_cpu_us_per_op")
    cells = [fmt(c_ops, 0), fmt(p_ops, 0),
             ratio(p_ops, c_ops, per_rep_ratios(runs, step, g, "rcpipe", "classic", "ops_per_sec")),
             fmt(c_cpu, 2), fmt(p_cpu, 2),
             ratio(p_cpu, c_cpu, per_rep_ratios(runs, step, g, "rcpipe", "classic",
                                                "server_cpu_us_per_op"))]
    return c_ops, p_ops, cells


PAIR_COLS = ["classic ops/s", "rcpipe ops/s", "ops/s ratio",
             "classic srv CPU µs/op", "rcpipe srv CPU µs/op", "srv CPU ratio"]


def step1(runs, out):
    groups = distinct(runs, 1, "group")
    if not groups:
        return None
    rows, plot = [], []
    for g in groups:
        op, size, t = re.match(r"(\w+)-d(\d+)-t(\d+)", g).groups()
        c_ops, p_ops, cells = pair_cells(runs, 1, g)
        rows.append([op.upper(), size, t] + cells + [
                     f"{fmt(m(runs, 1, g, 'classic', 'p50_us'))} / {fmt(m(runs, 1, g, 'classic', 'p99_us'))}",
                     f"{fmt(m(runs, 1, g, 'rcpipe', 'p50_us'))} / {fmt(m(runs, 1, g, 'rcpipe', 'p99_us'))}",
                     fmt(m(runs, 1, g, "rcpipe", "commands_per_write"), 1)])
        if op == "get" and size == "64":
            plot.append(f"{t} {c_ops or 'NaN'} {p_ops or 'NaN'}")
    with open(os.path.join(out, "threads.dat"), "w") as f:
        f.write("# threads classic_ops rcpipe_ops (GET 64 B)\n" + "\n".join(plot) + "\n")
    cols = ["op", "bytes", "threads"] + PAIR_COLS + [
            "classic p50/p99 µs", "rcpipe p50/p99 µs", "rcpipe cmds/write"]
    return table(cols, rows)


def step2(runs):
    variants = distinct(runs, 2, "variant")
    if not variants:
        return None
    ref = "redis-benchmark-P16"
    ref_ops, ref_cpu = m(runs, 2, None, ref, "ops_per_sec"), m(runs, 2, None, ref, "server_cpu_us_per_op")
    rows = []
    for v in variants:
        ops, cpu = m(runs, 2, None, v, "ops_per_sec"), m(runs, 2, None, v, "server_cpu_us_per_op")
        rows.append([v, fmt(ops, 0),
                     ratio(ops, ref_ops, per_rep_ratios(runs, 2, "get-d64", v, ref, "ops_per_sec")),
                     fmt(cpu, 2),
                     ratio(cpu, ref_cpu, per_rep_ratios(runs, 2, "get-d64", v, ref, "server_cpu_us_per_op")),
                     fmt(m(runs, 2, None, v, "p50_us")), fmt(m(runs, 2, None, v, "p99_us")),
                     fmt(m(runs, 2, None, v, "futex_wakes_per_op"), 2),
                     fmt(m(runs, 2, None, v, "commands_per_write"), 1)])
    cols = ["client", "ops/s", "ops/s vs -P 16", "srv CPU µs/op", "srv CPU vs -P 16",
            "p50 µs", "p99 µs", "futex wakes/op", "cmds/write"]
    return table(cols, rows)


def step3(runs, out):
    loads = distinct(runs, 3, "group", "load")
    if not loads:
        return None, []
    parts, choices = [], []
    variants = [v for v in distinct(runs, 3, "variant")
                if any(r["group"].startswith("load") for r in sel(runs, 3, None, v))]
    delays = [v for v in variants if v.startswith("bd")]
    cpu_lines, p99_lines = [], {}
    for g in loads:
        c_cpu = m(runs, 3, g, "classic", "server_cpu_us_per_op")
        p99_0 = m(runs, 3, g, "bd0", "p99_us")
        rows, best = [], None
        offered = m(runs, 3, g, "classic", "offered_ops_per_sec")
        for v in ["classic"] + delays:
            cpu, p99 = m(runs, 3, g, v, "server_cpu_us_per_op"), m(runs, 3, g, v, "p99_us")
            rows.append([v if v == "classic" else f"rcpipe, batch-delay-us {v[2:]}",
                         fmt(m(runs, 3, g, v, "offered_ops_per_sec"), 0),
                         fmt(m(runs, 3, g, v, "ops_per_sec"), 0),
                         fmt(cpu, 2), ratio(cpu, c_cpu), fmt(m(runs, 3, g, v, "p50_us")),
                         fmt(p99), ratio(p99, p99_0) if v != "classic" else "—"])
            achieved = m(runs, 3, g, v, "ops_per_sec")
            offer = m(runs, 3, g, v, "offered_ops_per_sec")
            kept_up = achieved is not None and offer and achieved >= 0.97 * offer
            if v.startswith("bd") and cpu is not None and p99 is not None and p99_0 \
                    and kept_up and p99 <= 2 * p99_0 and (best is None or cpu < best[1]):
                best = (v, cpu, p99)
        pct = g[4:]
        parts.append(f"Offered load {pct}% of the classic maximum"
                     f" ({fmt(offered, 0)} ops/s):\n\n" + table(
                         ["client", "offered ops/s", "achieved ops/s", "srv CPU µs/op",
                          "vs classic", "p50 µs", "p99 µs", "p99 vs pause 0"], rows))
        if best:
            choices.append(f"at {pct}%: batch-delay-us **{best[0][2:]}** "
                           f"({fmt(best[1], 2)} µs/op, p99 {fmt(best[2])} µs)")
        else:
            choices.append(f"at {pct}%: n/a")
        cpu_lines.append(" ".join([str(offered or "NaN"), str(c_cpu or "NaN")] +
                                  [str(m(runs, 3, g, v, "server_cpu_us_per_op") or "NaN") for v in delays]))
        for v in delays:
            p99_lines.setdefault(v[2:], []).append(str(m(runs, 3, g, v, "p99_us") or "NaN"))
    with open(os.path.join(out, "cpu_load.dat"), "w") as f:
        f.write("# offered classic " + " ".join(f"bd{d[2:]}" for d in delays) + "\n")
        f.write("\n".join(cpu_lines) + "\n")
    with open(os.path.join(out, "p99_delay.dat"), "w") as f:
        f.write("# batch_delay_us " + " ".join(g[4:] + "%" for g in loads) + "\n")
        f.write("\n".join(f"{d} " + " ".join(xs) for d, xs in p99_lines.items()) + "\n")
    return "\n\n".join(parts), choices


def step4(runs, out):
    groups = distinct(runs, 4, "group")
    if not groups:
        return None
    topo = {}
    try:
        with open(os.path.join(out, "topologies.tsv")) as f:
            for line in f:
                a, b, c = line.split()
                topo[a] = (b, c)
    except (OSError, ValueError):
        pass
    rows = []
    for g in sorted(groups, key=lambda g: int(g[1:])):
        ms, rs = topo.get(g[1:], (g[1:], "?"))
        rows.append([ms, rs] + pair_cells(runs, 4, g)[2] + [
                     fmt(m(runs, 4, g, "rcpipe", "commands_per_write"), 1)])
    return table(["masters", "replicas each"] + PAIR_COLS + [
                  "rcpipe cmds/write (per node connection)"], rows)


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def callgrind_total(base):
    text = read_text(base + ".cg")
    mo = re.search(r"^summary:\s*(\d+)", text, re.M) or re.search(r"^totals:\s*(\d+)", text, re.M)
    return int(mo.group(1)) if mo else None


def heap_allocs(base):
    text = read_text(base + ".vg")
    mo = re.search(r"total heap usage: ([\d,]+) allocs", text)
    return int(mo.group(1).replace(",", "")) if mo else None


def step5(runs):
    groups = distinct(runs, 5, "group")
    if not groups:
        return None, {}
    rows, found = [], {}
    for g in groups:
        def diff(tool, get):
            xs = {int(r["rep"]): get(r["base"]) for r in sel(runs, 5, g, tool) if r["status"] == "ok"}
            ns = sorted(xs)
            if len(ns) < 2 or xs[ns[0]] is None or xs[ns[-1]] is None:
                return None
            t = int(re.search(r"-t(\d+)$", g).group(1))
            return (xs[ns[-1]] - xs[ns[0]]) / ((ns[-1] - ns[0]) * t)
        instr = diff("callgrind", callgrind_total)
        allocs = diff("memcheck", heap_allocs)
        # --count-allocs counts the timed phase, which still holds some
        # per-run set-up: the difference of the two runs cancels it too.
        def lib_count(r):
            a, n = val(r, "allocs_per_op"), val(r, "ops")
            return a * n if a is not None and n is not None else None
        lib_runs = {int(r["rep"]): r for r in sel(runs, 5, g, "allocs") if r["data"]}
        lib = None
        if len(lib_runs) >= 2:
            lo, hi = lib_runs[min(lib_runs)], lib_runs[max(lib_runs)]
            c_lo, c_hi = lib_count(lo), lib_count(hi)
            if c_lo is not None and c_hi is not None and val(hi, "ops") != val(lo, "ops"):
                lib = (c_hi - c_lo) / (val(hi, "ops") - val(lo, "ops"))
        found[g] = (instr, allocs, lib)
        name, t = g.rsplit("-t", 1)
        rows.append([name, t, fmt(instr, 0), fmt(allocs, 2),
                     fmt(lib, 2) if sel(runs, 5, g, "allocs") else "—"])
    return table(["client", "threads", "instructions/request (callgrind)",
                  "heap allocations/request, all (memcheck)",
                  "library allocations/request (--count-allocs)"], rows), found


# ---- steps 6-8 (issue 12) ----------------------------------------------------

S6_ORDER = ["classic-async", "rcpipe-async", "rcpipe-callback", "rcpipe-libevent", "rcpipe-libuv"]


def step6(runs):
    groups = distinct(runs, 6, "group")
    if not groups:
        return None
    rows = []
    for g in groups:
        where, shape = g.split("-", 1)
        base = "classic-async"
        for v in S6_ORDER:
            rs = sel(runs, 6, g, v)
            if not rs:
                continue
            ops = m(runs, 6, g, v, "ops_per_sec")
            b_ops = m(runs, 6, g, base, "ops_per_sec")
            rr = per_rep_ratios(runs, 6, g, v, base, "ops_per_sec")
            cpu = m(runs, 6, g, v, "server_cpu_us_per_op")
            b_cpu = m(runs, 6, g, base, "server_cpu_us_per_op")
            cr = per_rep_ratios(runs, 6, g, v, base, "server_cpu_us_per_op")
            rows.append(["3 masters + 3 replicas" if where == "cluster" else "one node",
                         shape, v, fmt(ops, 0),
                         "1.00×" if v == base else ratio(ops, b_ops, rr),
                         (f"{min(rr):.2f}–{max(rr):.2f}" if rr else "n/a") if v != base else "—",
                         fmt(cpu, 2), "—" if v == base else ratio(cpu, b_cpu, cr),
                         fmt(m(runs, 6, g, v, "p50_us")), fmt(m(runs, 6, g, v, "p99_us")),
                         fmt(m(runs, 6, g, v, "commands_per_write")),
                         fmt(m(runs, 6, g, v, "futex_wakes_per_op"), 2),
                         fmt(m(runs, 6, g, v, "client_cpu_us_per_op"), 2)])
    return table(["server", "threads×depth", "client", "ops/s", "vs classic async",
                  "per-rep range", "srv CPU µs/op", "srv CPU vs classic", "p50 µs", "p99 µs",
                  "cmds/write", "futex wakes/op", "client CPU µs/op"], rows)


def step7(runs, out):
    groups = [g for g in distinct(runs, 7, "group") if g.startswith("load")]
    if not groups:
        return None, ""
    rows, dat = [], []
    for g in sorted(groups, key=lambda x: int(x[4:])):
        load = int(g[4:])
        line = [load]
        for v in ("classic", "rcpipe"):
            off = m(runs, 7, g, v, "offered_ops_per_sec")
            ach = m(runs, 7, g, v, "ops_per_sec")
            cpu = m(runs, 7, g, v, "server_proc_cpu_us_per_op")
            if cpu is None:
                cpu = m(runs, 7, g, v, "server_cpu_us_per_op")
            core = cpu * ach / 1e6 * 100 if cpu is not None and ach is not None else None
            rows.append([f"{load}%", v, fmt(off, 0), fmt(ach, 0),
                         fmt(ach / off * 100 if ach and off else None, 1) + "%",
                         fmt(cpu, 2), fmt(core, 1) + "%",
                         fmt(m(runs, 7, g, v, "p50_us")), fmt(m(runs, 7, g, v, "p99_us")),
                         fmt(m(runs, 7, g, v, "commands_per_write"))])
            line += [off, ach, cpu, core]
        dat.append(line)
    try:
        with open(os.path.join(out, "series_load.dat"), "w") as f:
            f.write("# load% classic: offered achieved cpu_us_op core% rcpipe: same\n")
            for line in dat:
                f.write(" ".join("nan" if x is None else f"{x:g}" for x in line) + "\n")
    except OSError:
        pass
    # The article's headline: how server CPU grows with load for each.
    note = ""
    # Only levels that both clients served (95% of the offered rate): past
    # saturation the CPU says how much was done, not what the load cost.
    ok = [d for d in dat if d[4] and d[8] and d[1] and d[2] >= 0.95 * d[1]
          and d[6] >= 0.95 * d[5]]
    if len(ok) >= 2:
        lo, hi = ok[0], ok[-1]
        note = (f"From {lo[0]}% to {hi[0]}% of the classic maximum (the highest level both "
                f"clients served), offered load grew "
                f"{hi[1] / lo[1]:.1f}×; the masters' CPU grew {hi[4] / lo[4]:.2f}× with classic "
                f"and {hi[8] / lo[8]:.2f}× with rcpipe (the article: 4× the load, 1.6× the "
                "Redis CPU with its pipelining connector).")
    return table(["load (of classic max)", "client", "offered ops/s", "achieved ops/s",
                  "achieved", "srv CPU µs/op (/proc)", "masters' CPU (of one core)",
                  "p50 µs", "p99 µs", "cmds/write"], rows), note


def perf_counts(base):
    """perf stat -x, output: {event name: count}."""
    counts = {}
    for line in read_text(base + ".perf").splitlines():
        p = line.split(",")
        if len(p) >= 3 and p[0].strip().isdigit():
            counts[p[2].split(":")[-1].replace("sys_enter_", "")] = int(p[0])
    return counts


S8_GROUPS = {"futex": ["futex"],
             "wait": ["epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select",
                      "pselect6"],
             "send": ["sendto", "write", "writev", "sendmsg"],
             "recv": ["recvfrom", "read", "readv", "recvmsg"]}


def step8(runs):
    groups = distinct(runs, 8, "group")
    if not groups:
        return None, {}
    rows, found = [], {}
    for g in groups:
        def two(tool):
            xs = {int(r["rep"]): r for r in sel(runs, 8, g, tool) if r["status"] == "ok"}
            ns = sorted(xs)
            return (xs[ns[0]], xs[ns[-1]], ns[-1] - ns[0]) if len(ns) >= 2 else None
        instr = None
        t = two("callgrind")
        if t:
            a, b = callgrind_total(t[0]["base"]), callgrind_total(t[1]["base"])
            if a is not None and b is not None:
                instr = (b - a) / t[2]
        sc = {}
        t = two("syscalls")
        if t:
            a, b = perf_counts(t[0]["base"]), perf_counts(t[1]["base"])
            if "raw_syscalls" in a or "sys_enter" in a:
                key = "sys_enter"
                sc["all"] = (b.get(key, 0) - a.get(key, 0)) / t[2]
                for name, evs in S8_GROUPS.items():
                    sc[name] = sum(b.get(e, 0) - a.get(e, 0) for e in evs) / t[2]
        name, d = g.rsplit("-d", 1)
        found[g] = (instr, sc)
        rows.append([name, d, fmt(instr, 0)] +
                    [fmt(sc.get(k), 2) for k in ("all", "futex", "wait", "send", "recv")])
    return table(["client", "depth (sync: threads)", "instructions/request",
                  "syscalls/request", "futex", "epoll/poll", "send/write", "recv/read"],
                 rows), found

# ---- targets -----------------------------------------------------------------

def verdict(value, limit, higher_is_better):
    if value is None:
        return "not measured"
    # Counts per request are differences of two runs: a float residue of
    # less than one allocation per 200 requests is 0.
    value = round(value, 2)
    ok = value >= limit if higher_is_better else value <= limit
    if ok:
        return "met"
    if limit == 0:
        return f"**missed** ({value:.2f} vs 0)"
    miss = (limit - value) / limit if higher_is_better else (value - limit) / limit
    return f"**missed** by {miss * 100:.0f}%"


def targets(runs, s5):
    rows = []
    g64 = "get-d64-t64"
    r = (m(runs, 1, g64, "rcpipe", "ops_per_sec") or 0) / m(runs, 1, g64, "classic", "ops_per_sec") \
        if m(runs, 1, g64, "classic", "ops_per_sec") else None
    rows.append(["64 sync callers: ops/s ≥ 4× classic", ratio_txt(r), verdict(r, 4, True)])
    ref_cpu = m(runs, 2, None, "redis-benchmark-P16", "server_cpu_us_per_op")
    sync_cpu = m(runs, 2, None, "sync-64", "server_cpu_us_per_op") or \
        m(runs, 1, g64, "rcpipe", "server_cpu_us_per_op")
    r = sync_cpu / ref_cpu if sync_cpu and ref_cpu else None
    rows.append(["64 sync callers: srv CPU µs/op ≤ 1.3× redis-benchmark -P 16", ratio_txt(r),
                 verdict(r, 1.3, False)])
    g4 = "get-d64-t4"
    c4 = m(runs, 1, g4, "classic", "ops_per_sec")
    r = m(runs, 1, g4, "rcpipe", "ops_per_sec") / c4 if c4 and m(runs, 1, g4, "rcpipe", "ops_per_sec") else None
    rows.append(["4 sync callers: ops/s ≥ 1.0× classic", ratio_txt(r), verdict(r, 1.0, True)])
    ref_ops = m(runs, 2, None, "redis-benchmark-P16", "ops_per_sec")
    a_ops = m(runs, 2, None, "async-4x16", "ops_per_sec")
    r = a_ops / ref_ops if a_ops and ref_ops else None
    rows.append(["async, 64 in flight (4×16): ops/s ≥ 0.9× redis-benchmark -P 16", ratio_txt(r),
                 verdict(r, 0.9, True)])
    for g, lim, label in (("rcpipe-async-t1", 0, "async: 0 allocations/request"),
                          ("rcpipe-sync-t1", 1, "sync: ≤ 1 allocation/request")):
        instr, allocs, lib = s5.get(g, (None, None, None))
        v = lib if lib is not None else None
        txt = (f"library {fmt(lib, 2)}; all (with hiredis, memcheck) {fmt(allocs, 2)}"
               if lib is not None or allocs is not None else "not measured")
        rows.append([label + " (library's own)", txt, verdict(v, lim, False)])
    fw = m(runs, 2, None, "async-4x16", "futex_wakes_per_op")
    rows.append(["async: < 1 futex wake/request", fmt(fw, 2),
                 "not measured" if fw is None else ("met" if fw < 1 else f"**missed** ({fw:.2f})")])
    g1 = "get-d64-t1"
    c1 = m(runs, 1, g1, "classic", "p50_us")
    p1 = m(runs, 1, g1, "rcpipe", "p50_us")
    r = p1 / c1 if p1 and c1 else None
    rows.append(["1 caller: p50 ≤ 1.0× classic",
                 f"{fmt(p1)} vs {fmt(c1)} µs = {ratio_txt(r)}" if r else "not measured",
                 verdict(r, 1.0, False)])
    return table(["target (issue 4)", "measured", ""], rows)


def ratio_txt(r):
    return "n/a" if r is None else f"{r:.2f}×"


# ---- the report ------------------------------------------------------------

STEP2_TEXT = ("GET of 64 B values. `async-TxD` is rcpipe's async mode with T threads "
    "each keeping D requests in flight; `sync-64` is 64 synchronous callers; "
    "`redis-benchmark-PN` is `redis-benchmark --cluster -t get -P N -c 50 -d 64 "
    "-r R` (`-c4`: 4 connections, 64 in flight like async-4x16), whose keys are `key:{tag}:NNNNNNNNNNNN` with one hash tag per master: "
    "R = keys/masters makes about the same total number of keys, preloaded with "
    "`redis-benchmark -t set` (6 random SETs per key: 98.7–100% of each master's "
    "keys existed when this was checked). Its -n is "
    "set from a short calibration run so that it runs about the test time; its "
    "server CPU is read from the masters' `INFO` before and after, as rcp-bench "
    "does. Commands:\n")
STEP5_TEXT = ("On the 3-master cluster, GET 64 B, a fixed number of requests per "
    "thread: two runs with -n N and -n 2N, difference divided by N × threads, "
    "so start-up and connection set-up cancel. Instructions are callgrind's "
    "user-space count (all threads; valgrind runs one thread at a time, so "
    "batches are not what they are natively); allocations are memcheck's "
    "`total heap usage` (library, hiredis and the bench tool's own); the "
    "library's own allocations come from rcp-bench `--count-allocs` (the "
    "allocator hooks; hiredis's reader allocations are not hooked). Commands:\n")


STEP6_TEXT = ("GET 64 B, T threads each keeping D requests in flight, closed loop. "
    "`classic-async` is hiredis 0.14's own async API: each thread runs a libevent "
    "`event_base` with one `redisAsyncContext` per master (routed by the bench's slot "
    "map; a MOVED would count as an error: the cluster is stable), and each reply's "
    "callback sends the next request, so D stay in flight. `rcpipe-async` is rcpipe's "
    "async mode as in step 2 (one shared handle; the thread refills when half its "
    "window is back); `rcpipe-callback` (`--refill callback`) sends the next request "
    "from the resolve callback on rcpipe's I/O thread, the same shape as classic's; "
    "`rcpipe-libevent`/`rcpipe-libuv` (`--event-loop`) give each thread its own "
    "loop and its own handle on it (`rcp_conn_options.loop`), refilled from the "
    "callbacks. Ratios are against classic-async in the same repetition. Commands "
    "(first shape):\n")
STEP7_TEXT = ("The shape of the RedisPipe article's benchmark: 64 threads, each on a fixed "
    "schedule (`--rate-limiting`) that starts a run of 5 to 15 requests back to back "
    "(`--series 5:15`; latency from the run's due time for its first request, from its "
    "own send for the others), GET 64 B, at rising fractions of the classic client's "
    "closed-loop maximum at 64 threads ({mx} ops/s), until classic no longer achieves "
    "95% of the offered rate. Server CPU is utime+stime of the masters' redis-server "
    "processes (`/proc/PID/stat`, the pid from `INFO`) over the run, divided by their "
    "`total_commands_processed` delta. Commands (first level):\n")
STEP8_TEXT = ("The numbers that do not move on a noisy machine. Each client runs a fixed "
    "number of GETs twice, N and 2N requests in all (sync clients: D threads, N/D "
    "each; async: one thread, D in flight), and the difference is divided by N, so "
    "start-up, connecting and the slot map cancel. Instructions: callgrind's "
    "user-space count of the whole process (under valgrind the threads take turns, so "
    "batches are not what they are natively). System calls: `perf stat` of the "
    "`raw_syscalls:sys_enter` tracepoint and the per-call ones, whole process, native "
    "speed; `epoll/poll` counts every epoll_wait/epoll_pwait(2)/poll, `send/write` and "
    "`recv/read` include eventfd wakes. `node-` rows run against one plain server. "
    "Commands (first client):\n")


def img(out, name, alt):
    """A plot, if gnuplot made it (the path is the one docs/perf.md uses)."""
    if not os.path.exists(os.path.join(out, name)):
        return ""
    return f"![{alt}](img/{name})\n"


def report(out):
    runs = load_runs(out)
    st = settings(out)
    skipped = []
    try:
        with open(os.path.join(out, "skipped.txt")) as f:
            skipped = [line.rstrip("\n").split("\t", 1) for line in f if "\t" in line]
    except OSError:
        pass
    failed = [r for r in runs if r["status"] != "ok"]
    p = []
    p.append("## The comparison suite (`bench/compare`)\n")
    p.append(f"Machine: {machine()}. Client and servers share the CPUs; the numbers "
             "to read are the ratios, each taken within this one run.\n")
    el = int(st.get("elapsed_s", "0") or 0)
    p.append(f"Run: `bench/compare{' --quick' if st.get('quick') == '1' else ''} "
             f"--test-time {st.get('test_time')} --reps {st.get('reps')} "
             f"--steps {st.get('steps')} build/bench/rcp-bench`, {st.get('test_time')} s per "
             f"timed run, {st.get('reps')} interleaved repetition(s) (order alternating; "
             "means shown, per-repetition ratio range in parentheses), "
             f"keys 0..{st.get('keys')} preloaded, {el // 60} min {el % 60} s in all. "
             "Unless a step says otherwise: a local cluster of 3 masters with 1 replica "
             "each (`tests/scripts/cluster.sh`), server CPU = Δ(used_cpu_user + used_cpu_sys) "
             "/ Δtotal_commands_processed summed over the masters (`INFO`); rcpipe is one "
             "`rcp_cluster` handle shared by all threads, classic a blocking hiredis "
             "connection per thread per master.\n")
    if skipped:
        p.append("Not measured in this run:\n")
        p += [f"- step {s}: {msg}" for s, msg in skipped]
        p.append("")
    if failed:
        p.append(f"{len(failed)} run(s) failed and are left out of the means: "
                 + ", ".join(f"step {r['step']} {r['group']} {r['variant']} rep {r['rep']}"
                             for r in failed) + ".\n")

    t1 = step1(runs, out)
    if t1:
        p.append("### 1. Threads sweep: synchronous callers\n")
        p.append("GET (`--ratio 0:1`) and SET (`--ratio 1:0`), N threads each doing one "
                 "request at a time. Commands (first pair; the others differ in -t, "
                 "--ratio and -d):\n")
        p.append(commands(runs, 1, 2) + "\n")
        p.append(t1 + "\n")
        p.append(img(out, "compare-threads.png", "GET 64 B throughput against threads"))
    t2 = step2(runs)
    if t2:
        p.append("### 2. The ceiling: async mode against redis-benchmark\n")
        p.append(STEP2_TEXT)
        p.append(commands(runs, 2, 8) + "\n")
        p.append(t2 + "\n")
    t3, choices = step3(runs, out)
    if t3:
        mx = ""
        try:
            with open(os.path.join(out, "classic-max.txt")) as f:
                mx = f"{float(f.read()):,.0f}"
        except (OSError, ValueError):
            pass
        p.append("### 3. Fixed offered load: the batching pause\n")
        p.append(f"64 threads, GET 64 B, open loop (`--rate-limiting` = target / 64 per "
                 f"thread; latency from the intended send time). The classic maximum is "
                 f"the classic client at 64 threads measured in this run ({mx} ops/s). "
                 "Commands (first level):\n")
        p.append(commands(runs, 3, 6) + "\n")
        p.append(t3 + "\n")
        p.append("Lowest server CPU per command with a p99 within 2× of batch-delay-us 0 "
                 "(and at least 97% of the offered rate achieved): "
                 + "; ".join(choices) + ".\n")
        p.append(img(out, "compare-cpu-load.png", "server CPU per command against offered load"))
        p.append(img(out, "compare-p99-delay.png", "p99 against the batching pause"))
    t4 = step4(runs, out)
    if t4:
        p.append("### 4. Scale: 1, 3 and 6 masters\n")
        p.append("GET 64 B, 64 threads. Six masters run without replicas: twelve "
                 "servers would crowd the two cores. Commands (as step 1's):\n")
        p.append(commands(runs, 4, 2) + "\n")
        p.append(t4 + "\n")
    t5, s5 = step5(runs)
    if t5:
        p.append("### 5. Client cost per request\n")
        p.append(STEP5_TEXT)
        p.append(commands(runs, 5, 3) + "\n")
        p.append(t5 + "\n")
    t6 = step6(runs)
    if t6:
        p.append("### 6. Async peers: classic async against rcpipe async\n")
        p.append(STEP6_TEXT)
        p.append(commands(runs, 6, 5) + "\n")
        p.append(t6 + "\n")
    t7, note7 = step7(runs, out)
    if t7:
        mx = ""
        try:
            with open(os.path.join(out, "s7-classic-max.txt")) as f:
                mx = f"{float(f.read()):,.0f}"
        except (OSError, ValueError):
            pass
        p.append("### 7. The RedisPipe article's load: server CPU against offered load\n")
        p.append(STEP7_TEXT.format(mx=mx))
        p.append(commands(runs, 7, 2) + "\n")
        p.append(t7 + "\n")
        if note7:
            p.append(note7 + "\n")
    t8, _ = step8(runs)
    if t8:
        p.append("### 8. Instructions and system calls per request\n")
        p.append(STEP8_TEXT)
        p.append(commands(runs, 8, 4) + "\n")
        p.append(t8 + "\n")
    if any(r["step"] in ("1", "2", "3", "4", "5") for r in runs):
        p.append("### Targets\n")
        p.append(targets(runs, s5) + "\n")
    return "\n".join(p)


def write_docs(out, perf_md):
    with open(os.path.join(out, "report.md")) as f:
        block = f.read().strip("\n")
    with open(perf_md) as f:
        text = f.read()
    a, b = text.find(BEGIN), text.find(END)
    if a < 0 or b < a:
        sys.exit(f"report.py: {perf_md} has no {BEGIN} ... {END} block")
    text = text[:a + len(BEGIN)] + "\n" + block + "\n" + text[b:]
    with open(perf_md, "w") as f:
        f.write(text)


def main(argv):
    if len(argv) == 7 and argv[1] == "mean":
        v = m(load_runs(argv[2]), argv[3], argv[4], argv[5], argv[6])
        print("None" if v is None else f"{v:.3f}")
    elif len(argv) == 3 and argv[1] == "report":
        print(report(argv[2]))
    elif len(argv) == 3 and argv[1] == "forty":
        import forty  # step 12's section (compare-lib/forty.py)
        print(forty.report(argv[2]))
    elif len(argv) == 4 and argv[1] == "write-docs":
        write_docs(argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
