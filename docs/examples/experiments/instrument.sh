#!/bin/sh
# Stand-in for an instrumented kernel (root): while the command runs, a
# private tracefs instance records every system call, page fault, scheduler
# event and interrupt. The instance is removed afterwards, also on Ctrl-C.
#   sudo sh instrument.sh noisescope run kernel-compile.toml --label instrumented
set -eu
T=/sys/kernel/tracing/instances/noisescope-example-instrumented
mkdir "$T"
cleanup() {
    echo 0 > "$T/tracing_on"
    echo 0 > "$T/events/enable"
    rmdir "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for events in raw_syscalls exceptions sched irq; do
    echo 1 > "$T/events/$events/enable"
done
"$@"
