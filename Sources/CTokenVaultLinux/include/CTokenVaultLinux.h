// A small shim for the Linux calls and macros Swift cannot import from Glibc.
// Every symbol is prefixed `ctv_`.
#ifndef CTOKENVAULT_LINUX_H
#define CTOKENVAULT_LINUX_H

#include <stdint.h>
#include <sys/types.h>
#include <pthread.h>

/// Peer credentials of a connected Unix socket (SO_PEERCRED).
typedef struct {
    int32_t pid;
    uint32_t uid;
    uint32_t gid;
} ctv_peer_cred;

/// getsockopt(fd, SOL_SOCKET, SO_PEERCRED). Returns 0 or -1 with errno set.
int ctv_get_peer_cred(int fd, ctv_peer_cred *out);

/// accept4(fd, NULL, NULL, SOCK_CLOEXEC). Returns the new fd or -1 with errno.
int ctv_accept_cloexec(int fd);

/// socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0).
int ctv_unix_stream_socket(void);

/// Binds `fd` to `path` (sun_path; fails with ENAMETOOLONG past 107 bytes).
int ctv_unix_bind(int fd, const char *path);

/// Connects `fd` to `path` (sun_path; fails with ENAMETOOLONG past 107 bytes).
int ctv_unix_connect(int fd, const char *path);

/// Makes the process non-dumpable and sets RLIMIT_CORE to 0. Returns 0 or -1.
int ctv_disable_core_dumps(void);

/// Whether the fd is a listening AF_UNIX stream socket (for LISTEN_FDS).
int ctv_is_listening_unix_socket(int fd);

/// Sets SO_RCVTIMEO and SO_SNDTIMEO in milliseconds (0 = none).
int ctv_set_socket_timeouts(int fd, int recv_ms, int send_ms);

/// Sends `len` bytes as one datagram to the abstract or path AF_UNIX address
/// in `addr` (used for sd_notify; a leading '@' means the abstract namespace).
int ctv_send_datagram(const char *addr, const void *buf, size_t len);

/// send(fd, buf, len, MSG_NOSIGNAL).
ssize_t ctv_send_nosignal(int fd, const void *buf, size_t len);

/// pipe2(fds, O_CLOEXEC | O_NONBLOCK).
int ctv_pipe_cloexec_nonblock(int fds[2]);

/// timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK).
int ctv_realtime_timerfd(void);

/// Arms `fd` to fire once at the absolute wall-clock time `seconds` (0 disarms),
/// with TFD_TIMER_CANCEL_ON_SET so a clock change wakes the reader with ECANCELED.
int ctv_timerfd_arm_at(int fd, double seconds);

/// A TCP listener on 127.0.0.1 with an ephemeral port (RFC 8252 loopback
/// redirect). Returns the fd (close-on-exec) and writes the port, or -1.
int ctv_tcp_listen_loopback(int *port_out);

/// pthread_rwlock_init with writers preferred (PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP),
/// so a steady stream of readers cannot starve a writer. Returns 0 or an errno value.
int ctv_rwlock_init_prefer_writer(pthread_rwlock_t *lock);

#endif
