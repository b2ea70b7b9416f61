#!/usr/bin/env python3
"""The helpers of bench/wave.sh (Python 3 standard library only).

  gen DIR               the wave: DIR/data/f*.dat, DIR/tasks.jsonl (each task with its arrival
                        time), DIR/arrivals.jsonl (the same tasks for `diffuse sim arrivals`)
  drive DIR URL TOKEN   submit each task of DIR/tasks.jsonl at its arrival time, sample
                        /v1/status every second into DIR/live.csv, wait until all have ended
  startup DIR           each local worker's start-up (request to hello) from DIR/dispatcher.log
  plot DIR SVG TITLE    live.csv and sim.csv as one SVG (demand, workers, queue); prints the summary

The wave is the SW workload's rate (`sw_rate` in crates/diffuse-sim/src/workload.rs: the Falkon
sine wave) with time compressed COMPRESS times and the rate scaled by SCALE, floored to whole
tasks per second as sw_rate floors it; seconds before the first arrival are cut to LEAD.
"""

import csv
import json
import math
import os
import sys
import threading
import time
import urllib.request

COMPRESS = float(os.environ.get("WAVE_COMPRESS", 36))  # original seconds per wave second
SCALE = float(os.environ.get("WAVE_SCALE", 0.007))  # tasks/s per original task/s
LEAD = 3  # seconds of nothing before the first arrival
FILES = 40  # distinct input files
FILE_SIZE = 100_000  # bytes each
COMPUTE_S = 1.0  # each task sleeps this long after reading its file


def sw_rate(sec):
    """crates/diffuse-sim/src/workload.rs's sw_rate, unfloored, at original second `sec`."""
    t = sec / 60.0 + 0.11
    return min(max((math.sin(math.sqrt(t) * 2.859678) + 1.0) * t * 5.705, 0.0), 1000.0)


def wave_rates():
    """Tasks arriving in each second of the compressed wave."""
    n = int(6504 / COMPRESS) + 1
    rates = [math.floor(sw_rate(s * COMPRESS) * SCALE) for s in range(n)]
    first = next(i for i, r in enumerate(rates) if r > 0)
    while rates and rates[-1] == 0:
        rates.pop()
    return [0] * LEAD + rates[first:]


def gen(work):
    os.makedirs(f"{work}/data", exist_ok=True)
    for i in range(FILES):
        with open(f"{work}/data/f{i:03d}.dat", "wb") as f:
            f.write(os.urandom(FILE_SIZE))
    k = 0
    with open(f"{work}/tasks.jsonl", "w") as tasks, open(f"{work}/arrivals.jsonl", "w") as arr:
        for sec, a in enumerate(wave_rates()):
            for j in range(a):
                # Spread evenly within the second, as the simulator's SW does, but half a step
                # later, so that no task arrives on the whole second, when both the live and
                # the simulated status are sampled.
                t = sec + (j + 0.5) / a
                i = (k * 7) % FILES  # every file in turn, so each is read several times
                task = {
                    "id": f"w{k:04d}",
                    "cmd": f"cat {{inputs[0]}} > /dev/null; sleep {COMPUTE_S:g}",
                    "inputs": [f"file://{work}/data/f{i:03d}.dat"],
                    "compute_s": COMPUTE_S,
                }
                tasks.write(json.dumps({"at": round(t, 4), "task": task}) + "\n")
                arr.write(json.dumps({"id": task["id"], "time": round(t, 4),
                                      "compute_s": COMPUTE_S,
                                      "inputs": [[i, FILE_SIZE]], "cores": 1}) + "\n")
                k += 1
    rates = wave_rates()
    print(f"wave: {k} tasks over {len(rates)} s, peak {max(rates)} tasks/s "
          f"(SW compressed {COMPRESS:g}x, rate x{SCALE:g})")


def request(url, token, method="GET", body=None):
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/x-ndjson"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


STATES = ["requested", "pending", "starting", "running", "idle", "lost", "releasing"]


def drive(work, url, token):
    plan = [json.loads(l) for l in open(f"{work}/tasks.jsonl")]
    demand = {}
    for p in plan:
        demand[int(p["at"])] = demand.get(int(p["at"]), 0) + 1
    start = time.monotonic()
    submitted_at = {}
    done = threading.Event()
    rows = []

    def sample():
        k = 0
        while True:
            k += 1
            s = request(f"{url}/v1/status", token)
            by = s.get("workers_by_state", {})
            t = time.monotonic() - start
            rows.append({
                "t_s": f"{t:.2f}", "demand": demand.get(k - 1, 0),
                "queued": s["queued"], "running": s["running"] + s.get("ending", 0),
                "succeeded": s["succeeded"], "failed": s["failed"],
                "alive": sum(by.get(x, 0) for x in STATES),
                "connected": by.get("running", 0) + by.get("idle", 0),
                **{x: by.get(x, 0) for x in STATES},
            })
            ended = s["succeeded"] + s["failed"] + s["cancelled"]
            if done.is_set() and ended >= len(plan) and rows[-1]["alive"] == 0:
                return
            if t > 900:
                print("the run did not end within 900 s", file=sys.stderr)
                return
            time.sleep(max(0.0, start + k - time.monotonic()))

    sampler = threading.Thread(target=sample)
    sampler.start()
    i = 0
    while i < len(plan):
        wait = start + plan[i]["at"] - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        batch = []
        now = time.monotonic() - start
        while i < len(plan) and plan[i]["at"] <= now + 0.001:
            batch.append(plan[i])
            i += 1
        body = "".join(json.dumps(p["task"]) + "\n" for p in batch).encode()
        request(f"{url}/v1/tasks", token, "POST", body)
        t = time.monotonic() - start
        for p in batch:
            submitted_at[p["task"]["id"]] = (p["at"], t)
    done.set()
    sampler.join()
    late = max(t - at for at, t in submitted_at.values())
    with open(f"{work}/live.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    # Each task's times, from the worker's report: waiting, staging, running.
    wall0 = time.time() - (time.monotonic() - start)
    out = []
    for p in plan:
        tid = p["task"]["id"]
        v = request(f"{url}/v1/tasks/{tid}", token)
        rep = json.loads(v["outcome"]["result_json"]) if v.get("outcome") else {}
        out.append({"id": tid, "state": v["state"], "node": v.get("node"),
                    "arrival": p["at"], "submitted": submitted_at[tid][1],
                    "started": rep.get("started_at", wall0) - wall0,
                    "staged": rep.get("staged_at", wall0) - wall0,
                    "finished": rep.get("finished_at", wall0) - wall0})
    with open(f"{work}/live_tasks.json", "w") as f:
        json.dump(out, f)
    print(f"live: {len(plan)} tasks submitted, at most {late * 1000:.0f} ms after their arrival time")
    s = request(f"{url}/v1/status", token)
    tr, pool = s["traffic"], s.get("pool", {})
    print(f"live: read from storage {tr['storage']} times ({tr['bytes_storage']} B), from peers "
          f"{tr['peer']}, locally {tr['local']}; handed off {pool.get('handed_off', 0)} objects "
          f"({pool.get('handed_off_bytes', 0)} B)")


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def plot(work, svg, title):
    live = read_csv(f"{work}/live.csv")
    sim = read_csv(f"{work}/sim.csv")
    sim_sum = json.load(open(f"{work}/sim.json"))
    tasks = json.load(open(f"{work}/live_tasks.json"))
    rates = wave_rates()
    # Live samples are taken at the end of each second (t_s ~ k); sim rows start at t (the end-of-
    # second values are the row's). Plot both at the end of their second.
    lt = [float(r["t_s"]) for r in live]
    st = [float(r["t_s"]) + 1 for r in sim]
    t_max = max(lt[-1], st[-1], len(rates))
    W, H, L, R = 1000, 620, 60, 190
    panels = [(40, 330, "tasks/s, workers"), (400, 560, "queued tasks")]
    x = lambda t: L + (W - L - R) * t / t_max
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>']

    def panel(top, bottom, label, y_max, series, bars=None):
        y = lambda v: bottom - (bottom - top) * v / y_max
        step = max(1, math.ceil(y_max / 6))
        for v in range(0, int(y_max) + 1, step):
            out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
        for t in range(0, int(t_max) + 1, 20):
            out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{bottom}" stroke="#eee"/>')
            out.append(f'<text x="{x(t):.1f}" y="{bottom + 15}" text-anchor="middle">{t}</text>')
        out.append(f'<rect x="{L}" y="{top}" width="{W - L - R}" height="{bottom - top}" '
                   f'fill="none" stroke="black"/>')
        out.append(f'<text transform="translate(16,{(top + bottom) / 2}) rotate(-90)" '
                   f'text-anchor="middle">{label}</text>')
        if bars:
            for t, v in bars:
                if v:
                    out.append(f'<rect x="{x(t):.1f}" y="{y(v):.1f}" width="{x(t + 1) - x(t):.1f}" '
                               f'height="{bottom - y(v):.1f}" fill="#ccc"/>')
        ly = top + 12
        if bars:
            out.append(f'<rect x="{W - R + 10}" y="{ly - 8}" width="20" height="10" fill="#ccc"/>')
            out.append(f'<text x="{W - R + 36}" y="{ly + 1}">demand (arrivals/s)</text>')
            ly += 18
        for name, pts, colour, dash, width in series:
            d = step_path(pts, x, y)  # a count holds until the next sample
            out.append(f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="{width}" '
                       f'stroke-dasharray="{dash}"/>')
            out.append(f'<line x1="{W - R + 10}" x2="{W - R + 30}" y1="{ly - 3}" y2="{ly - 3}" '
                       f'stroke="{colour}" stroke-width="{width}" stroke-dasharray="{dash}"/>')
            out.append(f'<text x="{W - R + 36}" y="{ly + 1}">{name}</text>')
            ly += 18

    live_alive = [(t, int(r["alive"])) for t, r in zip(lt, live)]
    live_conn = [(t, int(r["connected"])) for t, r in zip(lt, live)]
    sim_nodes = [(t, int(r["nodes"])) for t, r in zip(st, sim)]
    y1 = max(max(rates), max(v for _, v in live_alive), max(v for _, v in sim_nodes)) + 1
    panel(*panels[0], y1, [
        ("live: workers alive", live_alive, "#1f77b4", "", 2.5),
        ("live: connected", live_conn, "#1f77b4", "4 3", 1.2),
        ("sim: nodes", sim_nodes, "#ff7f0e", "", 2),
    ], bars=list(enumerate(rates)))
    live_q = [(t, int(r["queued"])) for t, r in zip(lt, live)]
    sim_q = [(t, int(r["queue"])) for t, r in zip(st, sim)]
    y2 = max(max(v for _, v in live_q), max(v for _, v in sim_q), 4) * 1.1
    panel(*panels[1], y2, [
        ("live: queued", live_q, "#7b2d8e", "", 2),
        ("sim: queued", sim_q, "#ff7f0e", "5 3", 2),
    ])
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 20}" text-anchor="middle">time (s)</text>')
    out.append("</svg>")
    with open(svg, "w") as f:
        f.write("\n".join(out) + "\n")

    # Summary.
    n = len(tasks)
    ok = sum(1 for t in tasks if t["state"] == "succeeded")
    live_end = max(t["finished"] for t in tasks)
    # Worker-seconds from the 1 s samples, up to the last completion (the simulation ends
    # there; the live pool then idles --idle-release more before it is given back).
    alive_s = sum(v for t, v in live_alive if t <= live_end + 0.5)
    conn_s = sum(v for t, v in live_conn if t <= live_end + 0.5)
    tail_s = sum(v for t, v in live_conn if t > live_end + 0.5)
    sim_node_s = sum(v for _, v in sim_nodes)
    resp = sum(t["finished"] - t["arrival"] for t in tasks) / n
    wait = sum(t["started"] - t["arrival"] for t in tasks) / n
    stage = sum(t["staged"] - t["started"] for t in tasks) / n
    run = sum(t["finished"] - t["staged"] for t in tasks) / n
    ups = [float(r["t_s"]) for r, p in zip(live[1:], live) if int(r["connected"]) > int(p["connected"])]
    print(f"tasks            {n} ({ok} succeeded live; {sim_sum['tasks']} simulated)")
    print(f"makespan         live {live_end:.1f} s, sim {sim_sum['makespan_s']:.1f} s "
          f"(last arrival {max(t['arrival'] for t in tasks):.1f} s)")
    print(f"worker-seconds   live {conn_s} connected ({alive_s} counting requested..releasing), "
          f"sim {sim_node_s} joined, to the last completion; live {tail_s} more idle after it")
    print(f"peak workers     live {max(v for _, v in live_alive)} alive / "
          f"{max(v for _, v in live_conn)} connected, sim {max(v for _, v in sim_nodes)}")
    print(f"peak queue       live {max(v for _, v in live_q)}, sim {max(v for _, v in sim_q)}")
    print(f"response time    live {resp:.2f} s (wait {wait:.2f}, staging {stage:.3f}, "
          f"process {run:.3f}), sim {sim_sum['avg_response_s']:.2f} s")
    print(f"workers acquired live {count_requests(work)}, sim {sim_sum['nodes_acquired']}")


def step_path(pts, x, y):
    d = []
    for k, (t, v) in enumerate(pts):
        if k == 0:
            d.append(f"M{x(t):.1f},{y(v):.1f}")
        else:
            d.append(f"H{x(t):.1f}V{y(v):.1f}")
    return " ".join(d)


def log_times(work):
    """(request name -> time requested, time joined), seconds, from the dispatcher's log."""
    import datetime
    import re
    times = {}
    for line in open(f"{work}/dispatcher.log"):
        m = re.match(r"(\S+Z) .*(worker requested request=\"(\S+?)\"|worker joined worker=(\S+))", line)
        if not m:
            continue
        t = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
        if m.group(3):
            times.setdefault(m.group(3), [None, None])[0] = t
        else:
            times.setdefault(m.group(4), [None, None])[1] = t
    return times


def startup(work):
    """Start-up of each local worker: from the pool's request to the worker's hello."""
    d = sorted(j - r for r, j in log_times(work).values() if r is not None and j is not None)
    if not d:
        sys.exit("no worker joined")
    med = d[len(d) // 2]
    print(f"median {med:.3f} s (min {d[0]:.3f}, max {d[-1]:.3f}, {len(d)} workers)")


def count_requests(work):
    try:
        return sum(1 for l in open(f"{work}/dispatcher.log") if "worker requested" in l)
    except OSError:
        return "?"


if __name__ == "__main__":
    cmd, work = sys.argv[1], sys.argv[2]
    if cmd == "gen":
        gen(work)
    elif cmd == "drive":
        drive(work, sys.argv[3], sys.argv[4])
    elif cmd == "startup":
        startup(work)
    elif cmd == "plot":
        plot(work, sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown command {cmd}")
