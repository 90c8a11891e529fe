@preconcurrency import Glibc
import VaultModel
import VaultSystem

/// Where the daemon's socket is (PRODUCT.md section 1).
public enum SocketPath {
    /// `$TOKENVAULT_SOCKET`, else `$XDG_RUNTIME_DIR/tokenvault/socket`,
    /// else `/tmp/tokenvault-$UID/socket`.
    public static func resolve(override: String? = nil) -> String {
        if let override { return override }
        if let env = Environment.get("TOKENVAULT_SOCKET") { return env }
        return defaultFolder() + "/socket"
    }

    /// The socket's folder when no override is given.
    public static func defaultFolder() -> String {
        if let runtime = Environment.get("XDG_RUNTIME_DIR") { return runtime + "/tokenvault" }
        return "/tmp/tokenvault-\(getuid())"
    }

    /// Checks the fallback folder under /tmp is ours and 0700; anything else
    /// (another user's folder, a symlink, a wider mode) is refused.
    public static func checkFolder(_ folder: String) throws(VaultError) {
        guard let info = FileSystem.ownerAndMode(folder) else { return }
        guard !info.isLink, info.isFolder else { throw VaultError(.denied, "socket folder \(folder) is not a folder") }
        guard info.uid == getuid() else { throw VaultError(.denied, "socket folder \(folder) is owned by another user") }
        guard info.mode & 0o077 == 0 else {
            throw VaultError(.denied, "socket folder \(folder) has mode \(String(info.mode, radix: 8)); it must be 0700")
        }
    }
}
