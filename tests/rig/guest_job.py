"""Runs inside the rig guest: the steps in OUT/steps.json, one after the other.

Each step's return code, output and duration go to OUT/results.json, which
is rewritten (atomically) after every step, so the results of the steps that
ran survive a later step that hangs the guest; a line on the console marks
the start and end of each (the console's tail then names a step that hung). Commands run from OUT, so
relative paths in a step's argv land in the share the host reads.
Standard library only: this starts before anything else in the guest.
"""

import json
import os
import signal
import subprocess
import sys
import time


def main(out: str) -> int:
    os.chdir(out)
    with open("steps.json") as file:
        steps = json.load(file)
    results, background = [], {}
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
                results.append(run(step))
            console(f"rig: step {step['name']} ended rc={results[-1]['returncode']} "
                    f"after {results[-1]['seconds']} s")
            save(results)
    finally:
        for name, process in background.items():
            stop(name, process)
    return 0


def run(step: dict) -> dict:
    began = time.monotonic()
    process = subprocess.Popen(step["argv"], env={**os.environ, **step["env"]}, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=step["timeout_s"])
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
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
