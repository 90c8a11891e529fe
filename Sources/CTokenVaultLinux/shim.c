#define _GNU_SOURCE
#include "CTokenVaultLinux.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <math.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

_Static_assert(sizeof(((struct ucred *)0)->pid) == sizeof(int32_t), "pid_t size");
_Static_assert(sizeof(((struct ucred *)0)->uid) == sizeof(uint32_t), "uid_t size");
_Static_assert(sizeof(((struct ucred *)0)->gid) == sizeof(uint32_t), "gid_t size");

int ctv_get_peer_cred(int fd, ctv_peer_cred *out) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    out->pid = cred.pid;
    out->uid = cred.uid;
    out->gid = cred.gid;
    return 0;
}

int ctv_accept_cloexec(int fd) {
    return accept4(fd, NULL, NULL, SOCK_CLOEXEC);
}

int ctv_unix_stream_socket(void) {
    return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

static int fill_addr(struct sockaddr_un *addr, const char *path) {
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(addr->sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path, path, n);
    return 0;
}

int ctv_unix_bind(int fd, const char *path) {
    struct sockaddr_un addr;
    if (fill_addr(&addr, path) != 0) return -1;
    return bind(fd, (struct sockaddr *)&addr, sizeof(addr));
}

int ctv_unix_connect(int fd, const char *path) {
    struct sockaddr_un addr;
    if (fill_addr(&addr, path) != 0) return -1;
    int r;
    do { r = connect(fd, (struct sockaddr *)&addr, sizeof(addr)); } while (r != 0 && errno == EINTR);
    return r;
}

int ctv_disable_core_dumps(void) {
    struct rlimit none = {0, 0};
    if (setrlimit(RLIMIT_CORE, &none) != 0) return -1;
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

int ctv_is_listening_unix_socket(int fd) {
    int type = 0, listening = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return 0;
    len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) return 0;
    struct sockaddr_un addr;
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, (struct sockaddr *)&addr, &alen) != 0) return 0;
    return type == SOCK_STREAM && listening && addr.sun_family == AF_UNIX;
}

int ctv_set_socket_timeouts(int fd, int recv_ms, int send_ms) {
    struct timeval r = {recv_ms / 1000, (recv_ms % 1000) * 1000};
    struct timeval s = {send_ms / 1000, (send_ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof(r)) != 0) return -1;
    return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof(s));
}

int ctv_send_datagram(const char *path, const void *buf, size_t len) {
    struct sockaddr_un addr;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(addr.sun_path)) { errno = ENAMETOOLONG; return -1; }
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path, n);
    if (path[0] == '@') addr.sun_path[0] = '\0';
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    ssize_t r = sendto(fd, buf, len, MSG_NOSIGNAL, (struct sockaddr *)&addr, alen);
    int saved = errno;
    close(fd);
    errno = saved;
    return r == (ssize_t)len ? 0 : -1;
}

ssize_t ctv_send_nosignal(int fd, const void *buf, size_t len) {
    return send(fd, buf, len, MSG_NOSIGNAL);
}

int ctv_pipe_cloexec_nonblock(int fds[2]) {
    return pipe2(fds, O_CLOEXEC | O_NONBLOCK);
}

int ctv_realtime_timerfd(void) {
    return timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK);
}

int ctv_timerfd_arm_at(int fd, double seconds) {
    struct itimerspec spec;
    memset(&spec, 0, sizeof(spec));
    if (seconds > 0) {
        double whole = floor(seconds);
        spec.it_value.tv_sec = (time_t)whole;
        spec.it_value.tv_nsec = (long)((seconds - whole) * 1e9);
        if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    }
    return timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &spec, NULL);
}

int ctv_tcp_listen_loopback(int *port_out) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    *port_out = ntohs(addr.sin_port);
    return fd;
}

int ctv_rwlock_init_prefer_writer(pthread_rwlock_t *lock) {
    pthread_rwlockattr_t attr;
    int r = pthread_rwlockattr_init(&attr);
    if (r != 0) return r;
    r = pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (r == 0) r = pthread_rwlock_init(lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    return r;
}
