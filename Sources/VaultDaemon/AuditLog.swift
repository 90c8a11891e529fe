@preconcurrency import Glibc
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

    /// Records one event.
    public func record(_ event: String, provider: String, account: String, pid: Int32, exe: String?) {
        let line = "\(WallClock.rfc3339(WallClock.now())) \(event) provider=\(provider) account=\(account) pid=\(pid) exe=\(exe ?? "?")\n"
        var bytes = Array(line.utf8)
        _ = bytes.withUnsafeMutableBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
