@preconcurrency import Glibc
import Synchronization
import VaultModel
import VaultSystem

/// The audit log: one line per token served (time, provider, account,
/// client pid and executable), never the token. Appended with `O_APPEND`,
/// one `write(2)` per line, file mode 0600.
public final class AuditLog: Sendable {
    private let fd: Int32
    /// The file.
    public let path: String

    public init(path: String) throws(VaultError) {
        self.path = path
        do { try FileSystem.makeFolders(FileSystem.parent(of: path)) } catch { throw VaultError(.failure, "cannot create audit log folder: \(error)") }
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw VaultError(.failure, "cannot open audit log: \(SystemError("open", path))") }
        self.fd = fd
    }

    deinit { close(fd) }

    /// The timestamp of the current second, formatted once per second.
    private let stamp = SharedLock<(second: Int, text: [UInt8])>((-1, []))

    /// Records one event (one `write(2)`; names are validated, so no escaping is needed).
    public func record(_ event: String, provider: String, account: String, pid: Int32, exe: String?) {
        let now = Int(WallClock.now())
        var line = stamp.read { s in s.second == now ? s.text : nil } ?? stamp.withLock { s -> [UInt8] in
            if s.second != now { s = (now, Array(WallClock.rfc3339(Double(now)).utf8)) }
            return s.text
        }
        line.reserveCapacity(line.count + 96 + (exe?.utf8.count ?? 1))
        line.append(0x20)
        line.append(contentsOf: event.utf8)
        line.append(contentsOf: " provider=".utf8)
        line.append(contentsOf: provider.utf8)
        line.append(contentsOf: " account=".utf8)
        line.append(contentsOf: account.utf8)
        line.append(contentsOf: " pid=".utf8)
        line.append(contentsOf: String(pid).utf8)
        line.append(contentsOf: " exe=".utf8)
        line.append(contentsOf: (exe ?? "?").utf8)
        line.append(0x0A)
        _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
