"""Runs inside the rig guest: the steps in OUT/steps.json, one after the other.

Each step's return code, output and duration go to OUT/results.json, which
is rewritten (atomically) after every step, so the results of the steps that
ran survive a later step that hangs the guest; a line on the console marks
the start and end of each, and every HEARTBEAT_S a line shows the guest is
alive (the console's tail then tells a step that hung from a guest that
stopped). A step at its time limit has its tasks' states written to the
console and its stderr, and is sent SIGABRT (its Python processes print
every thread's traceback) before SIGKILL; a step whose tasks outlive SIGKILL
ends the job (the guest is stuck: the host boots again for the rest).
Commands run from OUT, so
relative paths in a step's argv land in the share the host reads.
Standard library only: this starts before anything else in the guest.
"""

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

HEARTBEAT_S = 30
ABORT_GRACE_S = 10  # for the tracebacks of a step at its limit, then SIGKILL


def main(out: str) -> int:
    os.chdir(out)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core files of SIGABRT into the share
    with open("steps.json") as file:
        steps = json.load(file)
    results, background = [], {}
    threading.Thread(target=heartbeat, daemon=True).start()
    try:
        for step in steps:
            console(f"rig: step {step['name']} starts")
            if step["stop"]:
                results.append(stop(step["name"], background.pop(step["stop"], None)))
            elif step["background"]:
                background[step["name"]] = subprocess.Popen(
                    step["argv"], env={**os.environ, **step["env"]}, start_new_session=True,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                results.append(result(step["name"], 0, "", "", 0.0))
            else:
                ended = run(step)
                if ended is None:  # the guest is stuck: the host boots again for the rest
                    console(f"rig: step {step['name']} outlived SIGKILL: its tasks are stuck")
                    break
                results.append(ended)
            console(f"rig: step {step['name']} ended rc={results[-1]['returncode']} "
                    f"after {results[-1]['seconds']} s")
            save(results)
    finally:
        for name, process in background.items():
            stop(name, process)
    return 0


def run(step: dict) -> dict | None:
    """The step's result; None if a task of it survived SIGKILL at its limit."""
    began = time.monotonic()
    # PYTHONFAULTHANDLER: at the limit, SIGABRT makes every Python process of
    # the step print each thread's traceback to its stderr before it dies.
    process = subprocess.Popen(step["argv"], env={**os.environ, "PYTHONFAULTHANDLER": "1",
                                                  **step["env"]}, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=step["timeout_s"])
        code = process.returncode
    except subprocess.TimeoutExpired:
        stuck = tasks(process.pid)
        console(f"rig: step {step['name']} at its limit; its tasks:\n{stuck}")
        for signum in (signal.SIGABRT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):  # (it may end meanwhile)
                os.killpg(process.pid, signum)
            try:  # a task outside its process group may still hold the pipes
                stdout, stderr = process.communicate(timeout=ABORT_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                stdout, stderr = "", "(output lost: the pipes stayed open after the kill)"
        if any(state != "Z" for state in task_states(process.pid)):
            # Only the kernel keeps a task from dying on SIGKILL: one waiting in it for
            # ever, or one on an emulated CPU that stopped (a nohz_full CPU frozen in
            # user mode reports no RCU stall; the others run on).
            console(f"rig: step {step['name']}'s tasks after SIGKILL:\n{tasks(process.pid)}")
            return None
        stderr += f"\n(rig: killed at its limit; its tasks then:\n{stuck})"
        code = None
    return result(step["name"], code, stdout, stderr, time.monotonic() - began)


def stop(name: str, process) -> dict:
    if process is None:
        return result(name, None, "", "no such background step", 0.0)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    return result(name, 0, "", "", 0.0)


def result(name: str, code, stdout: str, stderr: str, seconds: float) -> dict:
    return {"name": name, "returncode": code, "stdout": stdout, "stderr": stderr,
            "seconds": round(seconds, 2)}


def heartbeat() -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        with open("/proc/loadavg") as load:
            console(f"rig: alive, load {' '.join(load.read().split()[:3])}")


def session_threads(session: int):
    """(pid, tid, command, /proc/PID/task/TID/stat's fields from the state on)
    of every thread of a session's processes."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(pid)) != session:
                continue
            for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
                with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                    command, fields = stat.read().split("(", 1)[1].rsplit(")", 1)
                yield pid, tid, command, fields.split()
        except OSError:
            continue


def task_states(session: int) -> list[str]:
    return [fields[0] for _, _, _, fields in session_threads(session)]


def tasks(session: int) -> str:
    """State, kernel wait channel, last CPU and command of every thread of a
    session's processes, and the kernel stack of those waiting uninterruptibly."""
    lines = []
    for pid, tid, command, fields in session_threads(session):
        task = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{task}/wchan") as wchan:
                waits = wchan.read() or "-"
            # fields[36]: the CPU it last ran on (stat's 39th field)
            lines.append(f"  {pid}/{tid} {fields[0]} {waits} cpu{fields[36]} {command}")
            if fields[0] == "D":
                with open(f"{task}/stack") as stack:
                    lines.extend(f"      {frame.strip()}" for frame in stack)
        except OSError:
            continue
    return "\n".join(lines) or "  (none left)"


def console(line: str) -> None:
    try:
        with open("/dev/console", "w") as out:
            out.write(f"{line} (uptime {open('/proc/uptime').read().split()[0]} s)\n")
    except OSError:
        pass


def save(results: list) -> None:
    with open("results.json.new", "w") as file:
        json.dump(results, file)
    os.replace("results.json.new", "results.json")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
