@preconcurrency import Glibc

/// Files and folders, the few operations the vault needs, with the modes
/// and durability it needs (`open(2)`, `fsync(2)`, `rename(2)`).
public enum FileSystem {
    /// Whether `path` exists (`stat`).
    public static func exists(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0
    }

    /// Reads the whole file (`open`, `read`). Throws `SystemError`.
    public static func read(_ path: String, limit: Int = 1 << 20) throws(SystemError) -> [UInt8] {
        let fd = retryOnInterrupt { open(path, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { throw SystemError("open", path) }
        defer { close(fd) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buf.withUnsafeMutableBytes { p in retryOnInterrupt { Glibc.read(fd, p.baseAddress, p.count) } }
            if n < 0 { throw SystemError("read", path) }
            if n == 0 { break }
            out.append(contentsOf: buf[0..<n])
            if out.count > limit { throw SystemError("read", path, errno: EFBIG) }
        }
        return out
    }

    /// Writes `bytes` to `path` atomically and durably: a temporary file
    /// with `mode` in the same folder, `fsync`, `rename`, then `fsync` of the folder.
    public static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) throws(SystemError) {
        let tmp = path + ".tmp.\(getpid())"
        let fd = retryOnInterrupt { open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode) }
        guard fd >= 0 else { throw SystemError("open", tmp) }
        var ok = false
        defer {
            if !ok { unlink(tmp) }
        }
        do {
            defer { close(fd) }
            _ = fchmod(fd, mode)
            var written = 0
            while written < bytes.count {
                let n = bytes.withUnsafeBytes { p in retryOnInterrupt { write(fd, p.baseAddress! + written, p.count - written) } }
                if n < 0 { throw SystemError("write", tmp) }
                written += n
            }
            guard fsync(fd) == 0 else { throw SystemError("fsync", tmp) }
        }
        guard rename(tmp, path) == 0 else { throw SystemError("rename", path) }
        ok = true
        syncFolder(of: path)
    }

    /// `fsync` of the folder holding `path`, so a rename inside it is durable.
    public static func syncFolder(of path: String) {
        let folder = parent(of: path)
        let fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { _ = fsync(fd); close(fd) }
    }

    /// The folder part of `path` ("." when there is none).
    public static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let p = String(path[..<slash])
        return p.isEmpty ? "/" : p
    }

    /// Creates `path` and its missing parents; the last one gets `mode`
    /// (parents get 0700 too: they are ours).
    public static func makeFolders(_ path: String, mode: mode_t = 0o700) throws(SystemError) {
        if exists(path) { return }
        let p = parent(of: path)
        if p != path && !exists(p) { try makeFolders(p, mode: 0o700) }
        if mkdir(path, mode) != 0 && errno != EEXIST { throw SystemError("mkdir", path) }
    }

    /// Ownership and mode of `path` (`lstat`), or nil if it does not exist.
    public static func ownerAndMode(_ path: String) -> (uid: uid_t, mode: mode_t, isFolder: Bool, isLink: Bool)? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return (st.st_uid, st.st_mode & 0o7777, (st.st_mode & S_IFMT) == S_IFDIR, (st.st_mode & S_IFMT) == S_IFLNK)
    }

    /// Removes a file; a missing file is not an error.
    public static func remove(_ path: String) throws(SystemError) {
        if unlink(path) != 0 && errno != ENOENT { throw SystemError("unlink", path) }
    }
}

/// The process environment, read without Foundation.
public enum Environment {
    /// The value of `name`, or nil when unset or empty.
    public static func get(_ name: String) -> String? {
        guard let p = getenv(name) else { return nil }
        let s = String(cString: p)
        return s.isEmpty ? nil : s
    }

    /// The user's home folder: `$HOME`, else the passwd entry.
    public static var home: String {
        if let h = get("HOME") { return h }
        if let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir { return String(cString: dir) }
        return "/"
    }
}
