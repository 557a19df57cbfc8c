/* noisescope-launch: runs workloads for the bench harness, one at a time.
 *
 *   noisescope-launch REQUEST_FD RESULT_FD
 *
 * Why a separate small program: at exec the kernel folds the high-water RSS
 * of the address space being replaced into the new program's maxrss, so a
 * workload spawned straight from the (large) Python harness reports the
 * harness's memory as its own. Spawned from this launcher it carries at most
 * the launcher's few hundred KiB, as under GNU time. It stays up for a whole
 * experiment, so a run costs the harness no extra exec.
 *
 * Each request on REQUEST_FD is a 4-byte length (host order) and that many
 * bytes of NUL-terminated strings: the program's path, argc, argv[0..argc-1],
 * envc, env[0..envc-1], cwd ("" to stay). For each one the
 * launcher spawns the program in a process group of its own (so the harness
 * can end it and its children), writes "P pid\n" to RESULT_FD, waits for
 * it, then writes one line of integers:
 *
 *   R spawn_errno wait_status wall_ns user_us sys_us maxrss_kib nvcsw nivcsw minflt majflt
 *
 * (only the R line, with spawn_errno set, when the spawn fails). It exits at
 * the end of REQUEST_FD. Everything else - CPU affinity, scheduling policy,
 * core-scheduling cookie, stdout and stderr - the workload inherits from it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REQUEST (16u << 20)

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

/* Transfers exactly `size` bytes, reading (POLLIN) or writing (POLLOUT),
 * through short transfers, signals and non-blocking pipes that are empty or
 * full (the harness may hand such over): waits until the pipe is ready.
 * 0 on success, -1 at end of file or on error (such as a vanished harness). */
static int transfer_all(int fd, char *data, size_t size, short direction)
{
    while (size > 0) {
        ssize_t done = direction == POLLIN ? read(fd, data, size) : write(fd, data, size);
        if (done < 0 && errno == EINTR)
            continue;
        if (done < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd ready = {.fd = fd, .events = direction};
            if (poll(&ready, 1, -1) >= 0 || errno == EINTR)
                continue;
        }
        if (done <= 0)
            return -1;
        data += done;
        size -= (size_t)done;
    }
    return 0;
}

/* Formats one line and writes all of it. */
__attribute__((format(printf, 2, 3))) static int write_line(int fd, const char *format, ...)
{
    char line[256];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(line, sizeof line, format, args);
    va_end(args);
    if (length < 0 || (size_t)length >= sizeof line)
        return -1;
    return transfer_all(fd, line, (size_t)length, POLLOUT);
}

/* Splits the request into path, argv, envp and cwd (pointers into `data`). */
static int parse_request(char *data, size_t size, char **path, char ***argv, char ***envp,
                         char **cwd)
{
    char *at = data, *end = data + size;
    if (memchr(at, '\0', size) == NULL)
        return -1;
    *path = at;
    at += strlen(at) + 1;
    long counts[2];
    char **lists[2] = {NULL, NULL};
    for (int part = 0; part < 2; part++) {
        if (at >= end || memchr(at, '\0', (size_t)(end - at)) == NULL)
            goto bad;
        counts[part] = strtol(at, NULL, 10);
        at += strlen(at) + 1;
        if (counts[part] < 0 || counts[part] > (long)size || (part == 0 && counts[part] == 0))
            goto bad;
        lists[part] = calloc((size_t)counts[part] + 1, sizeof(char *));
        if (lists[part] == NULL)
            goto bad;
        for (long i = 0; i < counts[part]; i++) {
            if (at >= end || memchr(at, '\0', (size_t)(end - at)) == NULL)
                goto bad;
            lists[part][i] = at;
            at += strlen(at) + 1;
        }
    }
    if (at >= end || memchr(at, '\0', (size_t)(end - at)) == NULL)
        goto bad;
    *argv = lists[0];
    *envp = lists[1];
    *cwd = at;
    return 0;
bad:
    free(lists[0]);
    free(lists[1]);
    return -1;
}

static void run_one(const char *path, char **argv, char **envp, const char *cwd, int results)
{
    posix_spawnattr_t attr;
    posix_spawn_file_actions_t actions;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaddset(&defaults, sig);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawn_file_actions_init(&actions);
    if (cwd[0] != '\0')
        posix_spawn_file_actions_addchdir_np(&actions, cwd);

    pid_t pid;
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    int status = 0;
    int64_t start = monotonic_ns();
    int error = posix_spawn(&pid, path, &actions, &attr, argv, envp);
    if (error == 0) {
        write_line(results, "P %d\n", (int)pid);
        while (wait4(pid, &status, 0, &usage) < 0) {
            if (errno != EINTR) {
                error = errno;
                break;
            }
        }
    }
    int64_t wall = monotonic_ns() - start;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    write_line(results, "R %d %d %lld %lld %lld %ld %ld %ld %ld %ld\n", error, status,
               (long long)wall, microseconds(usage.ru_utime), microseconds(usage.ru_stime),
               usage.ru_maxrss, usage.ru_nvcsw, usage.ru_nivcsw, usage.ru_minflt,
               usage.ru_majflt);
}

int main(int argc, char **argv)
{
    long fds[2];
    for (int i = 0; i < 2 && argc == 3; i++) {
        char *end = NULL;
        fds[i] = strtol(argv[i + 1], &end, 10);
        if (end == argv[i + 1] || *end != '\0' || fds[i] < 3 ||
            fcntl((int)fds[i], F_SETFD, FD_CLOEXEC) != 0)
            argc = 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s REQUEST_FD RESULT_FD (file descriptors from the harness)\n",
                argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a vanished harness shows as a failed write */
    for (;;) {
        uint32_t size;
        if (transfer_all((int)fds[0], (char *)&size, sizeof size, POLLIN) != 0)
            return 0; /* the harness is done */
        if (size == 0 || size > MAX_REQUEST)
            return 3;
        char *data = malloc(size);
        char *path, **run_argv, **run_envp, *cwd;
        if (data == NULL || transfer_all((int)fds[0], data, size, POLLIN) != 0 ||
            parse_request(data, size, &path, &run_argv, &run_envp, &cwd) != 0) {
            free(data);
            return 3;
        }
        run_one(path, run_argv, run_envp, cwd, (int)fds[1]);
        free(run_argv);
        free(run_envp);
        free(data);
    }
}
