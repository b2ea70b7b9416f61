#!/usr/bin/env python3
"""The simulator against an emulated pool of a cluster's size: see bench/sim_vs_emulated.sh."""
import json, os, signal, subprocess, sys, time, urllib.request

DIFFUSE, WORK = sys.argv[1], sys.argv[2]
ROWS = sys.argv[3].split(",")  # WORKERSxSLOTS:COMPUTE_S
WAVES = int(sys.argv[4])
TOKEN = os.environ["DIFFUSE_CLIENT_TOKEN"]


def call(port, path, data=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def wait_for(what, check, timeout=300):
    start = time.time()
    while time.time() - start < timeout:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{what}: not after {timeout} s")


def row(n, spec):
    shape, compute = spec.split(":")
    workers, slots = (int(x) for x in shape.split("x"))
    compute = float(compute)
    d = os.path.join(WORK, f"row{n}")
    os.makedirs(d)
    port = 20000 + (os.getpid() + n) % 20000
    url = f"http://127.0.0.1:{port}"
    logs = open(os.path.join(d, "log"), "w")
    disp = subprocess.Popen([DIFFUSE, "dispatcher", "--listen", f"127.0.0.1:{port}",
                             "--journal", os.path.join(d, "j.sqlite")],
                            stdout=logs, stderr=logs)
    emu = None
    try:
        wait_for("the dispatcher", lambda: call(port, "/v1/status") is not None)
        emu = subprocess.Popen([DIFFUSE, "emulate", "--dispatcher", url, "--workers", str(workers),
                                "--slots", str(slots)], stdout=subprocess.DEVNULL, stderr=logs)
        wait_for("the emulated pool", lambda: call(port, "/v1/status")["workers"] >= workers)
        testbed = os.path.join(d, "pool.toml")
        cal = subprocess.run([DIFFUSE, "calibrate", "--dispatcher", url, "--dispatch-only",
                              "--node-startup", "1", "--out", testbed],
                             capture_output=True, text=True)
        if cal.returncode != 0:
            raise SystemExit(f"calibrate failed: {cal.stderr}")
        latency = next(float(l.split("=")[1]) for l in open(testbed)
                       if l.startswith("dispatch_latency_s"))
        ntasks = WAVES * workers * slots
        tasks = os.path.join(d, "tasks.jsonl")
        with open(tasks, "w") as f:
            for i in range(ntasks):
                f.write(json.dumps({"id": f"t{i}", "cmd": ["true"], "compute_s": compute}) + "\n")
        body = open(tasks, "rb").read()
        start = time.time()
        batch = call(port, "/v1/tasks", body)["batch"]
        while True:
            b = call(port, f"/v1/batches/{batch}")
            if b["succeeded"] + b["failed"] + b["cancelled"] >= ntasks:
                break
            if emu.poll() is not None or time.time() - start > 600 + 100 * WAVES * compute:
                raise SystemExit(f"row {spec}: the emulated pool stopped or took too long: {b}")
            time.sleep(0.01)
        measured = time.time() - start
        if b["succeeded"] != ntasks:
            raise SystemExit(f"row {spec}: {b['failed']} failed, {b['cancelled']} cancelled")
    finally:
        for p in (emu, disp):
            if p is not None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
    sim = subprocess.run([DIFFUSE, "sim", "run", tasks, "--testbed", testbed,
                          "--provisioning", "static", "--json"], capture_output=True, text=True)
    if sim.returncode != 0:
        raise SystemExit(f"sim failed: {sim.stderr}")
    simulated = json.loads(sim.stdout)["makespan_s"]
    err = (simulated - measured) / measured * 100
    print(f"{workers} workers x {slots} slots, {ntasks} tasks of {compute:g} s: "
          f"empty task {latency * 1e3:.1f} ms of a slot (calibrated); emulated makespan "
          f"{measured:.2f} s, simulated {simulated:.2f} s ({err:+.1f}%)", flush=True)
    return compute, err


rows = [row(n, spec) for n, spec in enumerate(ROWS)]
# The goal (issue 40) is for tasks of a second or more; shorter rows show where the model stops.
goal = [err for compute, err in rows if compute >= 1]
if goal:
    worst = max(goal, key=abs)
    print(f"largest error of the simulated makespan, tasks of 1 s or more: {worst:+.1f}% "
          f"({'within' if abs(worst) <= 15 else 'NOT within'} 15%)")
