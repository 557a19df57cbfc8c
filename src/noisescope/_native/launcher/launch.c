/* noisescope-launch: spawn one workload run, wait for it, report what it cost.
 *
 *   noisescope-launch RESULT_FD PROGRAM [ARGS...]
 *
 * Why a separate small program: at exec the kernel folds the high-water RSS
 * of the address space being replaced into the new program's maxrss, so a
 * workload spawned straight from the (large) Python harness reports the
 * harness's memory as its own. Spawned from this launcher it carries at most
 * the launcher's few hundred KiB, as under GNU time.
 *
 * The workload inherits everything else from the launcher: CPU affinity,
 * scheduling policy, core-scheduling cookie, process group, environment,
 * working directory, stdin/stdout/stderr. The launcher writes one line of
 * integers to RESULT_FD once the workload has ended:
 *
 *   spawn_errno wait_status wall_ns user_us sys_us maxrss_kib nvcsw nivcsw minflt majflt
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int64_t monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static long long microseconds(struct timeval t)
{
    return (long long)t.tv_sec * 1000000 + t.tv_usec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s RESULT_FD PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    char *end = NULL;
    long fd = strtol(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || fd < 3 || fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0) {
        fprintf(stderr, "%s: bad result descriptor %s\n", argv[0], argv[1]);
        return 2;
    }
    /* The harness ends a run by signalling the whole process group; the
     * launcher itself ignores nothing and forwards nothing. */
    pid_t pid;
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    int status = 0;
    int64_t start = monotonic_ns();
    int error = posix_spawnp(&pid, argv[2], NULL, NULL, &argv[2], environ);
    if (error == 0) {
        while (wait4(pid, &status, 0, &usage) < 0) {
            if (errno != EINTR) {
                error = errno;
                break;
            }
        }
    }
    int64_t wall = monotonic_ns() - start;
    char line[256];
    int length = snprintf(line, sizeof line, "%d %d %lld %lld %lld %ld %ld %ld %ld %ld\n", error,
                          status, (long long)wall, microseconds(usage.ru_utime),
                          microseconds(usage.ru_stime), usage.ru_maxrss, usage.ru_nvcsw,
                          usage.ru_nivcsw, usage.ru_minflt, usage.ru_majflt);
    if (length <= 0 || write((int)fd, line, (size_t)length) != length)
        return 3;
    return 0;
}
