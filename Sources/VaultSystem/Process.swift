@preconcurrency import Glibc
internal import CTokenVaultLinux

/// Process-wide settings for a process that holds secrets.
public enum ProcessHardening {
    /// Turns core dumps off and makes the process non-dumpable
    /// (`setrlimit(RLIMIT_CORE, 0)`, `prctl(PR_SET_DUMPABLE, 0)`), so key
    /// material never lands in a core file or in another process's ptrace.
    public static func disableCoreDumps() throws(SystemError) {
        guard ctv_disable_core_dumps() == 0 else { throw SystemError("prctl", "PR_SET_DUMPABLE") }
    }

    /// Ignores `SIGPIPE`, so a peer that goes away is an `EPIPE`, not a death.
    public static func ignoreSIGPIPE() {
        signal(SIGPIPE, SIG_IGN)
    }
}

/// systemd's notification protocol (`sd_notify(3)`), written to
/// `$NOTIFY_SOCKET` directly with no libsystemd.
public enum SystemdNotify {
    /// Sends `state` ("READY=1", "STOPPING=1", "STATUS=…") if `NOTIFY_SOCKET` is set.
    /// Returns whether a message was sent.
    @discardableResult
    public static func send(_ state: String) -> Bool {
        guard let path = Environment.get("NOTIFY_SOCKET") else { return false }
        let bytes = Array(state.utf8)
        return bytes.withUnsafeBytes { p in ctv_send_datagram(path, p.baseAddress, p.count) } == 0
    }

    /// The listening descriptors passed by systemd (`LISTEN_FDS`, `LISTEN_PID`),
    /// starting at fd 3; empty when none were passed to this process.
    public static func listenFDs() -> [Int32] {
        guard let pidText = Environment.get("LISTEN_PID"), let pid = Int32(pidText), pid == getpid(),
              let countText = Environment.get("LISTEN_FDS"), let count = Int32(countText), count > 0 else { return [] }
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_FDNAMES")
        return (0..<count).map { 3 + $0 }
    }
}
