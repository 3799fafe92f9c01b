/* Moves a server's wall clock at run time: CLOCK_REALTIME and gettimeofday()
 * read the real time plus an offset in microseconds read from the file named
 * by DISTLOCK_CLOCK_OFFSET_FILE (absent or unreadable: no offset). Monotonic
 * clocks are untouched. Only system calls are used, never malloc or dlsym, so
 * it works under jemalloc, where libfaketime recurses at start-up; the number
 * is parsed here rather than by strtoll, which a newer glibc's headers bind to
 * a symbol an older one (a container image's) lacks. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_us(void) {
    const char *path = getenv("DISTLOCK_CLOCK_OFFSET_FILE");
    if (!path) return 0;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    if (fd < 0) return 0;
    char text[32];
    long n = syscall(SYS_read, fd, text, sizeof text - 1);
    syscall(SYS_close, fd);
    if (n <= 0) return 0;
    text[n] = 0;
    const char *c = text;
    int negative = *c == '-';
    if (negative) c++;
    long long value = 0;
    for (; *c >= '0' && *c <= '9'; c++) value = value * 10 + (*c - '0');
    return negative ? -value : value;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    long rc = syscall(SYS_clock_gettime, id, ts);
    if (rc != 0 || (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE)) return (int)rc;
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_us() * 1000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
