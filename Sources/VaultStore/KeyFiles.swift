@preconcurrency import Glibc
import VaultCrypto
import VaultModel
import VaultSystem

/// The daemon's key files: the device key, and where the vault key of a
/// vault without a passphrase lives (by default `vault.key` beside it; with
/// the Secret Service store, an item in the login collection).
public struct KeyFiles: Sendable {
    /// Wraps the `always*` class keys and binds `*-this-device-only` keys to the machine.
    public let deviceKeyPath: String
    /// Where a vault key file sits when the vault key lives in a file.
    public let vaultKeyPath: String
    /// Where the vault key of a vault without a passphrase lives.
    public let vaultKey: any VaultKeyLocation

    public init(deviceKeyPath: String, vaultKeyPath: String) {
        self.init(deviceKeyPath: deviceKeyPath, vaultKeyPath: vaultKeyPath, vaultKey: VaultKeyFile(path: vaultKeyPath))
    }

    public init(deviceKeyPath: String, vaultKeyPath: String, vaultKey: any VaultKeyLocation) {
        self.deviceKeyPath = deviceKeyPath
        self.vaultKeyPath = vaultKeyPath
        self.vaultKey = vaultKey
    }

    /// The files in `folder`: `device.key` and `vault.key`.
    public init(folder: String) {
        self.init(deviceKeyPath: folder + "/device.key", vaultKeyPath: folder + "/vault.key")
    }

    /// The same device key, with the vault key kept in `location`.
    public func keepingVaultKey(in location: any VaultKeyLocation) -> KeyFiles {
        KeyFiles(deviceKeyPath: deviceKeyPath, vaultKeyPath: vaultKeyPath, vaultKey: location)
    }

    /// The same device key, with the vault key in the file `vaultKeyPath`.
    public var withVaultKeyFile: KeyFiles { keepingVaultKey(in: VaultKeyFile(path: vaultKeyPath)) }

    /// Reads a key file, checking its size and that nobody else can read it.
    static func load(_ path: String, what: String) throws(VaultError) -> SecretKey? {
        guard let info = FileSystem.ownerAndMode(path) else { return nil }
        guard !info.isLink, !info.isFolder else { throw VaultError(.failure, "\(what) \(path) is not a regular file") }
        guard info.uid == getuid() else { throw VaultError(.denied, "\(what) \(path) is owned by another user") }
        guard info.mode & 0o077 == 0 else {
            throw VaultError(.denied, "\(what) \(path) is readable by others (mode \(String(info.mode, radix: 8))); chmod 600 it")
        }
        var bytes: [UInt8]
        do { bytes = try FileSystem.read(path, limit: 64) } catch { throw VaultError(.failure, "cannot read \(what): \(error)") }
        defer { secureZero(&bytes) }
        guard bytes.count == SecretKey.byteCount else { throw VaultError(.failure, "\(what) \(path) is damaged (\(bytes.count) bytes, expected \(SecretKey.byteCount))") }
        do { return try SecretKey(SecureBytes(copying: bytes)) } catch { throw VaultError(.failure, "cannot hold \(what) in guarded memory: \(error)") }
    }

    /// Writes a new random key to `path` (0600, atomically, durably).
    static func create(_ path: String, what: String) throws(VaultError) -> SecretKey {
        do {
            let key = try SecretKey.random()
            var bytes = key.withUnsafeBytes { Array($0) }
            defer { secureZero(&bytes) }
            try FileSystem.makeFolders(FileSystem.parent(of: path))
            try FileSystem.writeAtomically(path, bytes, mode: 0o600)
            return key
        } catch let e as SystemError {
            throw VaultError(.failure, "cannot write \(what): \(e)")
        } catch {
            throw VaultError(.failure, "cannot create \(what) \(path): \(error)")
        }
    }
}

/// Where the vault key of a vault without a passphrase lives. With a
/// passphrase the vault key is derived and never stored, so none of this
/// is used. Implementations: `VaultKeyFile` (a 0600 file beside the device
/// key) and the Secret Service store's item in the login collection.
public protocol VaultKeyLocation: Sendable {
    /// For messages, e.g. "vault key /home/u/.local/share/tokenvault/vault.key".
    var description: String { get }
    /// The key, or nil when there is none. Throws `locked` when it exists but cannot be read now.
    func load() throws(VaultError) -> SecretKey?
    /// Stores `key` durably, replacing any key there.
    func save(_ key: SecretKey) throws(VaultError)
    /// Removes the key; succeeds when there is none.
    func remove() throws(VaultError)
}

extension VaultKeyLocation {
    /// A new random key, saved here.
    func create() throws(VaultError) -> SecretKey {
        let key: SecretKey
        do { key = try SecretKey.random() } catch { throw VaultError(.failure, "cannot create the vault key: \(error)") }
        try save(key)
        return key
    }
}

/// The vault key in a 0600 file (`vault.key` beside `device.key`).
public struct VaultKeyFile: VaultKeyLocation {
    public let path: String

    public init(path: String) { self.path = path }

    public var description: String { "vault key \(path)" }

    public func load() throws(VaultError) -> SecretKey? { try KeyFiles.load(path, what: "vault key") }

    public func save(_ key: SecretKey) throws(VaultError) {
        var bytes = key.withUnsafeBytes { Array($0) }
        defer { secureZero(&bytes) }
        do {
            try FileSystem.makeFolders(FileSystem.parent(of: path))
            try FileSystem.writeAtomically(path, bytes, mode: 0o600)
        } catch {
            throw VaultError(.failure, "cannot write vault key \(path): \(error)")
        }
    }

    public func remove() throws(VaultError) { try FileSystemShim.remove(path) }
}

/// This machine's identity (`/etc/machine-id`): an identifier, not key material.
public enum MachineIdentity {
    /// The contents of `/etc/machine-id` (or `path`), trimmed.
    public static func read(path: String = "/etc/machine-id") throws(VaultError) -> String {
        let bytes: [UInt8]
        do { bytes = try FileSystem.read(path, limit: 4096) } catch { throw VaultError(.failure, "cannot read the machine identity: \(error)") }
        let text = String(decoding: bytes, as: UTF8.self).trimmingWhitespace()
        guard !text.isEmpty else { throw VaultError(.failure, "machine identity \(path) is empty") }
        return text
    }
}

extension String {
    /// The string without leading and trailing ASCII whitespace.
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        let isSpace: (Unicode.Scalar) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }
        guard let first = scalars.firstIndex(where: { !isSpace($0) }), let last = scalars.lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(scalars[first...last])
    }
}
