#!/usr/bin/env python3
"""The dispatcher against emulated pools (`diffuse emulate`): see bench/scale.sh."""
import json, os, signal, subprocess, sys, threading, time, urllib.request

DIFFUSE, EMULATOR, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
COUNTS = [int(x) for x in sys.argv[4].split(",")]
NOOP = int(sys.argv[5])
SLOTS = 4
TICK = os.sysconf("SC_CLK_TCK")


def call(port, path, data=None, tok=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Authorization": f"Bearer {tok or os.environ['DIFFUSE_CLIENT_TOKEN']}"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read()


def status(port):
    return json.loads(call(port, "/v1/status"))


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def submit(port, prefix, n, batch=50000, compute=None):
    for lo in range(0, n, batch):
        lines = []
        for i in range(lo, min(n, lo + batch)):
            t = {"id": f"{prefix}{i}", "cmd": ["true"]}
            if compute is not None:
                t["compute_s"] = compute
            lines.append(json.dumps(t))
        call(port, "/v1/tasks", "\n".join(lines).encode())


def wait_done(port, n, timeout=900):
    start = time.time()
    while time.time() - start < timeout:
        s = status(port)
        if s["succeeded"] + s["failed"] >= n:
            return s
        time.sleep(0.05)
    raise SystemExit(f"not done after {timeout} s: {s}")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000 if xs else float("nan")


def probe(port, stop, lat):
    """Latencies while the dispatcher runs at full rate: status, a listing, 10,000-task submissions."""
    k = 0
    while not stop.is_set():
        for key, fn in [("status", lambda: call(port, "/v1/status")),
                        ("listing", lambda: call(port, "/v1/tasks?state=succeeded&limit=100"))]:
            t = time.perf_counter(); fn(); lat[key].append(time.perf_counter() - t)
        if k % 5 == 0:
            t = time.perf_counter(); submit(port, f"p{k}-", 10000, batch=10000); lat["submit10k"].append(time.perf_counter() - t)
            lat["probe_tasks"] += 10000
        k += 1
        time.sleep(0.05)


def one(workers):
    port = 20000 + (os.getpid() + workers) % 20000
    journal = f"{WORK}/j{workers}.sqlite"
    d = subprocess.Popen([DIFFUSE, "dispatcher", "--listen", f"127.0.0.1:{port}", "--journal", journal] + os.environ.get("DISPATCHER_ARGS", "").split(),
                         stderr=open(f"{WORK}/d{workers}.log", "w"))
    try:
        for _ in range(100):
            try:
                status(port); break
            except Exception:
                time.sleep(0.1)
        t0 = time.time()
        e = subprocess.Popen([EMULATOR, "emulate", "--dispatcher", f"http://127.0.0.1:{port}", "--workers", str(workers),
                              "--slots", str(SLOTS)], stdout=subprocess.PIPE, stderr=open(f"{WORK}/e{workers}.log", "w"))
        while status(port)["workers"] < workers:
            if e.poll() is not None:
                raise SystemExit(f"emulator exited: {e.stdout.read()}")
            time.sleep(0.1)
        connect_s = time.time() - t0
        row = {"workers": workers, "connect_s": connect_s, "rss_idle_mb": rss_mb(d.pid)}
        # No-op tasks, with the latency probe running alongside.
        lat = {"status": [], "listing": [], "submit10k": [], "probe_tasks": 0}
        stop = threading.Event()
        c0, ce0, t0 = cpu_s(d.pid), cpu_s(e.pid), time.time()
        prober = threading.Thread(target=probe, args=(port, stop, lat)); prober.start()
        submit(port, "n", NOOP)
        # Tasks/s counted over what ran while the probe also submitted.
        while True:
            s = status(port)
            if s["succeeded"] >= NOOP:
                break
            time.sleep(0.05)
        stop.set(); prober.join()
        done = wait_done(port, NOOP + lat["probe_tasks"])
        wall = time.time() - t0
        row.update(noop_tasks=NOOP + lat["probe_tasks"], noop_per_s=(NOOP + lat["probe_tasks"]) / wall,
                   cpu_dispatcher_s=cpu_s(d.pid) - c0, cpu_emulator_s=cpu_s(e.pid) - ce0,
                   rss_mb=rss_mb(d.pid),
                   status_ms=(pct(lat["status"], 50), pct(lat["status"], 99)),
                   listing_ms=(pct(lat["listing"], 50), pct(lat["listing"], 99)),
                   submit10k_ms=(pct(lat["submit10k"], 50), pct(lat["submit10k"], 99)))
        # 1-s tasks: two waves of the whole pool; the ideal makespan is 2 s (plus submission).
        n1 = workers * SLOTS * 2
        base = done["succeeded"]
        t0 = time.time()
        submit(port, "s", n1, compute=1.0)
        wait_done(port, base + n1)
        wall = time.time() - t0
        row.update(one_s_tasks=n1, one_s_makespan=wall, one_s_per_s=n1 / wall)
        return row
    finally:
        if "e" in locals():
            e.send_signal(signal.SIGTERM)
            try:
                out, _ = e.communicate(timeout=60)
                emu = json.loads(out or b"{}")
                if emu.get("errors"):
                    print(f"  emulator errors: {emu}", file=sys.stderr)
            except Exception as ex:
                print(f"  emulator: {ex}", file=sys.stderr); e.kill()
        d.terminate()
        d.wait(timeout=60)


print(f"{'workers':>7} {'connect s':>9} {'no-op/s':>8} {'1-s tasks/s':>11} {'(ideal)':>8} {'disp CPU s':>10} {'emu CPU s':>9} "
      f"{'RSS MB':>7} {'status p50/p99 ms':>18} {'listing p50/p99':>16} {'submit 10k p50/p99':>19}")
for w in COUNTS:
    r = one(w)
    print(f"{r['workers']:>7} {r['connect_s']:>9.1f} {r['noop_per_s']:>8.0f} {r['one_s_per_s']:>11.0f} {w*SLOTS:>8} "
          f"{r['cpu_dispatcher_s']:>10.1f} {r['cpu_emulator_s']:>9.1f} {r['rss_mb']:>7.0f} "
          f"{r['status_ms'][0]:>8.1f}/{r['status_ms'][1]:<9.1f} {r['listing_ms'][0]:>7.1f}/{r['listing_ms'][1]:<8.1f} "
          f"{r['submit10k_ms'][0]:>8.0f}/{r['submit10k_ms'][1]:<10.0f}", flush=True)
    with open(f"{WORK}/rows.jsonl", "a") as f:
        f.write(json.dumps(r) + "\n")
