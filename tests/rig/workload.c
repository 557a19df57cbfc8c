/* The rig's test workload: spins on its CPU for a while and reports where it
 * ran and with which core-scheduling cookie, as the workload itself sees it.
 *
 *   workload MILLISECONDS
 *
 * With $RIG_SIBLING set to a CPU, it forks a second task of its own that moves to
 * that CPU; once there, the child sets the moment both stop spinning and tells
 * the parent, which waits for it asleep: the two spin side by side for the
 * whole time, however long the move took (the workload's own second thread on
 * the sibling). It reports first, then spins. One
 * line goes to $RIG_REPORT (appended): the configuration ($RIG_CONFIG), the
 * CPUs it may run on (sched_getaffinity) and its cookie
 * (prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET, 0, PIDTYPE_PID, &cookie): the
 * only scope GET accepts), or the errno of that call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#endif
#define PR_SCHED_CORE_GET 0
#define PIDTYPE_PID 0

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void spin_until(double end)
{
    volatile unsigned long n = 0;
    while (now() < end)
        n++;
}

static void report(void)
{
    const char *path = getenv("RIG_REPORT");
    if (!path)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    unsigned long cookie = 0;
    int rc = prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET, 0, PIDTYPE_PID, (unsigned long)&cookie);
    int error = rc == 0 ? 0 : errno;
    FILE *out = fopen(path, "a");
    if (!out)
        return;
    const char *config = getenv("RIG_CONFIG");
    fprintf(out, "{\"config\": \"%s\", \"pid\": %d, \"cpus\": [", config ? config : "", getpid());
    for (int cpu = 0, first = 1; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set)) {
            fprintf(out, first ? "%d" : ", %d", cpu);
            first = 0;
        }
    fprintf(out, "], \"cookie\": %lu, \"cookie_errno\": %d}\n", cookie, error);
    fclose(out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MILLISECONDS\n", argv[0]);
        return 2;
    }
    report();
    double seconds = atof(argv[1]) / 1000.0, end = now() + seconds;
    const char *sibling = getenv("RIG_SIBLING");
    pid_t child = -1;
    if (sibling && *sibling) {
        int ready[2];
        if (pipe(ready) != 0)
            return 1;
        child = fork();
        if (child == 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(atoi(sibling), &set);
            if (sched_setaffinity(0, sizeof set, &set) != 0)
                _exit(3);
            sched_yield(); /* runs on the sibling from here */
            end = now() + seconds;
            if (write(ready[1], &end, sizeof end) != sizeof end)
                _exit(4);
            spin_until(end);
            _exit(0);
        }
        if (read(ready[0], &end, sizeof end) != sizeof end)
            return 1;
    }
    spin_until(end);
    if (child > 0) {
        int status;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 1;
    }
    return 0;
}
