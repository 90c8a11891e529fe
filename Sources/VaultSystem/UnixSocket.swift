@preconcurrency import Glibc
internal import CTokenVaultLinux

/// The credentials of the process at the other end of a Unix socket.
public struct PeerCredentials: Sendable, Equatable {
    public let pid: Int32
    public let uid: UInt32
    public let gid: UInt32

    /// The peer's executable (`readlink /proc/PID/exe`), or nil if unknown.
    public var executablePath: String? {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/\(pid)/exe", &buf, buf.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A connected stream socket that owns its descriptor and closes it in `deinit`.
///
/// Thread safety: one reader and one writer may use it at the same time
/// (the kernel serialises each direction); `shutdown` may be called from any thread.
public final class SocketConnection: Sendable {
    /// The descriptor; valid until this object is released.
    public let fd: Int32

    /// Takes ownership of `fd`.
    public init(adopting fd: Int32) { self.fd = fd }

    deinit { close(fd) }

    /// Connects to the Unix socket at `path` (`socket`, `connect`).
    public static func connect(path: String) throws(SystemError) -> SocketConnection {
        let fd = ctv_unix_stream_socket()
        guard fd >= 0 else { throw SystemError("socket", path) }
        guard ctv_unix_connect(fd, path) == 0 else {
            let e = SystemError("connect", path)
            close(fd)
            throw e
        }
        return SocketConnection(adopting: fd)
    }

    /// The peer's uid, gid and pid (`getsockopt(SO_PEERCRED)`).
    public func peerCredentials() throws(SystemError) -> PeerCredentials {
        var cred = ctv_peer_cred()
        guard ctv_get_peer_cred(fd, &cred) == 0 else { throw SystemError("getsockopt(SO_PEERCRED)", "socket") }
        return PeerCredentials(pid: cred.pid, uid: cred.uid, gid: cred.gid)
    }

    /// Waits until readable (`poll`). Returns false on timeout. `timeoutMs` < 0 waits forever.
    public func waitReadable(timeoutMs: Int32) throws(SystemError) -> Bool {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let r = retryOnInterrupt { poll(&p, 1, timeoutMs) }
        if r < 0 { throw SystemError("poll", "socket") }
        return r > 0
    }

    /// Reads up to `count` bytes into `buffer` at `offset` (`read`);
    /// 0 means the peer closed.
    public func read(into buffer: inout [UInt8], offset: Int, count: Int) throws(SystemError) -> Int {
        let n = buffer.withUnsafeMutableBytes { p in
            retryOnInterrupt { Glibc.read(fd, p.baseAddress! + offset, count) }
        }
        if n < 0 { throw SystemError("read", "socket") }
        return n
    }

    /// Reads up to `count` bytes, blocking at most `timeoutMs` (`SO_RCVTIMEO`,
    /// then one `read`): one system call per wait instead of `poll` plus
    /// `read`. Returns nil on timeout, 0 when the peer closed.
    /// `currentTimeoutMs` caches the socket's setting so it is set only on change.
    public func read(into buffer: inout [UInt8], count: Int, timeoutMs: Int32, currentTimeoutMs: inout Int32) throws(SystemError) -> Int? {
        if timeoutMs != currentTimeoutMs {
            var tv = timeval(tv_sec: Int(timeoutMs / 1000), tv_usec: Int(timeoutMs % 1000) * 1000)
            guard setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
                throw SystemError("setsockopt(SO_RCVTIMEO)", "socket")
            }
            currentTimeoutMs = timeoutMs
        }
        let n = buffer.withUnsafeMutableBytes { p in retryOnInterrupt { Glibc.read(fd, p.baseAddress!, count) } }
        if n < 0 {
            if errno == EAGAIN || errno == EWOULDBLOCK { return nil }
            throw SystemError("read", "socket")
        }
        return n
    }

    /// Writes all of `bytes` (`send` with `MSG_NOSIGNAL`), waiting at most
    /// `timeoutMs` in total for the peer to take them.
    public func writeAll(_ bytes: [UInt8], timeoutMs: Int32 = 5000) throws(SystemError) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { p in
                retryOnInterrupt { ctv_send_nosignal(fd, p.baseAddress! + sent, p.count - sent) }
            }
            if n < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK {
                    var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    let r = retryOnInterrupt { poll(&p, 1, timeoutMs) }
                    if r <= 0 { throw SystemError("send", "socket", errno: r == 0 ? ETIMEDOUT : errno) }
                    continue
                }
                throw SystemError("send", "socket")
            }
            sent += n
        }
    }

    /// Sets receive and send timeouts (`SO_RCVTIMEO`, `SO_SNDTIMEO`).
    public func setTimeouts(receiveMs: Int32, sendMs: Int32) {
        _ = ctv_set_socket_timeouts(fd, receiveMs, sendMs)
    }

    /// Shuts both directions down (`shutdown(SHUT_RDWR)`), waking a blocked reader.
    public func shutdown() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }
}

/// A listening Unix stream socket.
public final class UnixListener: Sendable {
    /// The listening descriptor.
    public let fd: Int32
    /// The path it is bound to, if this process bound it (nil when inherited).
    public let boundPath: String?

    private init(fd: Int32, boundPath: String?) {
        self.fd = fd
        self.boundPath = boundPath
    }

    deinit { close(fd) }

    /// Adopts an inherited listening socket (systemd's `LISTEN_FDS`), after
    /// checking it is a listening `AF_UNIX` stream socket.
    public static func adopt(fd: Int32) throws(SystemError) -> UnixListener {
        guard ctv_is_listening_unix_socket(fd) != 0 else { throw SystemError("adopt", "fd \(fd) (not a listening Unix stream socket)", errno: ENOTSOCK) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        return UnixListener(fd: fd, boundPath: nil)
    }

    /// Binds and listens at `path` (`socket`, `bind` under `umask(0177)` so the
    /// socket is born 0600, `listen`). A stale socket file nobody listens on
    /// is replaced; a live one is an `EADDRINUSE` error.
    public static func bind(path: String, backlog: Int32 = 128) throws(SystemError) -> UnixListener {
        if FileSystem.exists(path) {
            if let probe = try? SocketConnection.connect(path: path) {
                _ = probe
                throw SystemError("bind", path, errno: EADDRINUSE)
            }
            try FileSystem.remove(path)
        }
        let fd = ctv_unix_stream_socket()
        guard fd >= 0 else { throw SystemError("socket", path) }
        let old = umask(0o177)
        let r = ctv_unix_bind(fd, path)
        let bindErrno = errno
        umask(old)
        guard r == 0 else {
            close(fd)
            throw SystemError("bind", path, errno: bindErrno)
        }
        guard listen(fd, backlog) == 0 else {
            let e = SystemError("listen", path)
            close(fd)
            throw e
        }
        return UnixListener(fd: fd, boundPath: path)
    }

    /// Accepts one connection (`accept4` with `SOCK_CLOEXEC`); nil on timeout.
    public func accept(timeoutMs: Int32) throws(SystemError) -> SocketConnection? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let r = retryOnInterrupt { poll(&p, 1, timeoutMs) }
        if r < 0 { throw SystemError("poll", "listener") }
        if r == 0 { return nil }
        let c = retryOnInterrupt { ctv_accept_cloexec(fd) }
        if c < 0 {
            if errno == EAGAIN || errno == ECONNABORTED { return nil }
            throw SystemError("accept", "listener")
        }
        return SocketConnection(adopting: c)
    }

    /// Removes the socket file if this process created it.
    public func unlinkPath() {
        if let boundPath { unlink(boundPath) }
    }
}

extension SocketConnection {
    /// Shuts the receiving side down (`shutdown(SHUT_RD)`): a blocked reader
    /// sees end of file, while a response being written still goes out.
    public func shutdownRead() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RD))
    }
}

/// A pipe whose only use is to wake a thread blocked in `poll` (`pipe2`).
public final class WakePipe: Sendable {
    public let readFD: Int32
    public let writeFD: Int32

    public init() throws(SystemError) {
        var fds: [Int32] = [0, 0]
        guard ctv_pipe_cloexec_nonblock(&fds) == 0 else { throw SystemError("pipe2", "wake pipe") }
        readFD = fds[0]
        writeFD = fds[1]
    }

    deinit {
        close(readFD)
        close(writeFD)
    }

    /// Wakes every poller of `readFD` (the byte is never read, so it stays readable).
    public func wake() {
        var b: UInt8 = 1
        _ = write(writeFD, &b, 1)
    }
}

extension UnixListener {
    /// Waits for a connection or for `wake` to fire; nil when woken (or on a
    /// transient accept error). Accepts with `accept4(SOCK_CLOEXEC)`.
    public func accept(wake: WakePipe) throws(SystemError) -> SocketConnection? {
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0)]
        let r = retryOnInterrupt { poll(&fds, 2, -1) }
        if r < 0 { throw SystemError("poll", "listener") }
        if fds[1].revents != 0 { return nil }
        let c = retryOnInterrupt { ctv_accept_cloexec(fd) }
        if c < 0 {
            switch errno {
            case EAGAIN, ECONNABORTED, EPROTO, EMFILE, ENFILE, ENOBUFS, ENOMEM: return nil
            default: throw SystemError("accept", "listener")
            }
        }
        return SocketConnection(adopting: c)
    }
}

/// A TCP listener on 127.0.0.1 with an ephemeral port, for the OAuth
/// loopback redirect (RFC 8252 section 7.3). Closed in `deinit`.
public final class LoopbackListener: Sendable {
    public let fd: Int32
    /// The port the kernel chose.
    public let port: Int

    public init() throws(SystemError) {
        var port: Int32 = 0
        let fd = ctv_tcp_listen_loopback(&port)
        guard fd >= 0 else { throw SystemError("bind", "127.0.0.1:0") }
        self.fd = fd
        self.port = Int(port)
    }

    deinit { close(fd) }

    /// Stops accepting at once (`shutdown(2)` on the listening socket: new
    /// connections are refused); the descriptor is closed in `deinit`.
    public func stopListening() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Accepts one connection, waiting at most `timeoutMs`; nil on timeout.
    public func accept(timeoutMs: Int32) throws(SystemError) -> SocketConnection? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let r = retryOnInterrupt { poll(&p, 1, timeoutMs) }
        if r < 0 { throw SystemError("poll", "loopback listener") }
        if r == 0 { return nil }
        let c = retryOnInterrupt { ctv_accept_cloexec(fd) }
        if c < 0 { return nil }
        return SocketConnection(adopting: c)
    }
}

extension SocketConnection {
    /// Whether the peer has closed its end (`poll` for `POLLRDHUP`/`POLLHUP`, no wait).
    public var peerHasClosed: Bool {
        let pollRDHUP: Int16 = 0x2000  // POLLRDHUP, which Glibc hides behind _GNU_SOURCE
        var p = pollfd(fd: fd, events: pollRDHUP, revents: 0)
        guard poll(&p, 1, 0) > 0 else { return false }
        return p.revents & (pollRDHUP | Int16(POLLHUP | POLLERR)) != 0
    }
}
