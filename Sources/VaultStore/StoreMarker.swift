import VaultCrypto
import VaultModel
import VaultSystem

/// `store.json` in the data folder: which store holds the vault, and the
/// vault's id among the Secret Service items (an identifier, not a secret).
///
/// It is what keeps `auto` from quietly starting a second, empty vault: once
/// it says `secret-service`, the daemon uses the Secret Service or refuses to
/// start. Its atomic replacement (`writeAtomically`: temporary file, fsync,
/// rename, fsync of the folder) is the commit point of a migration.
/// Without the file, a `vault.db` holding a vault means `sqlite`.
public struct StoreMarker: Sendable, Equatable {
    public enum Backend: String, Sendable {
        case sqlite
        case secretService = "secret-service"
    }

    public var backend: Backend
    /// Hex id in the `vault` attribute of this vault's Secret Service items.
    public var vaultID: String

    public init(backend: Backend, vaultID: String) {
        self.backend = backend
        self.vaultID = vaultID
    }

    /// `store.json` in `folder`.
    public static func path(in folder: String) -> String { folder + "/store.json" }

    /// A new random vault id (16 bytes, hex).
    public static func newVaultID() -> String { Hex.encode(randomBytes(16)) }

    /// Whether `text` is a vault id as `newVaultID` makes them.
    public static func isValidVaultID(_ text: String) -> Bool {
        text.utf8.count == 32 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// The marker in `folder`, or nil when there is none.
    public static func read(folder: String) throws(VaultError) -> StoreMarker? {
        let path = path(in: folder)
        guard FileSystem.exists(path) else { return nil }
        let bytes: [UInt8]
        do { bytes = try FileSystem.read(path, limit: 4096) } catch { throw VaultError(.failure, "cannot read \(path): \(error)") }
        guard let json = try? JSON.parse(bytes), let o = json.objectValue,
              let b = o["store"]?.stringValue, let backend = Backend(rawValue: b),
              let id = o["vault_id"]?.stringValue, isValidVaultID(id) else {
            throw VaultError(.failure, "\(path) is damaged: it must say {\"store\": \"sqlite\" or \"secret-service\", \"vault_id\": 32 hex digits}")
        }
        return StoreMarker(backend: backend, vaultID: id)
    }

    /// Writes the marker into `folder`, atomically and durably.
    public func write(folder: String) throws(VaultError) {
        let path = Self.path(in: folder)
        let json = JSON.object(JSONObject([("store", .string(backend.rawValue)), ("vault_id", .string(vaultID))]))
        do {
            try FileSystem.makeFolders(folder)
            try FileSystem.writeAtomically(path, json.serialized() + [10], mode: 0o600)
        } catch {
            throw VaultError(.failure, "cannot write \(path): \(error)")
        }
    }
}
