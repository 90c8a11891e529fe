import VaultModel

/// What an item holds.
public enum ItemKind: String, Sendable, CaseIterable {
    /// An OAuth token set: access token, refresh token and the response fields.
    case token
    /// A provider's client secret.
    case clientSecret = "client-secret"
}

/// An item's identity: unique in a vault, and bound into its seal.
public struct ItemKey: Hashable, Sendable, CustomStringConvertible {
    public let provider: String
    public let account: String
    public let kind: ItemKind

    public init(provider: String, account: String = ItemName.defaultAccount, kind: ItemKind = .token) {
        self.provider = provider
        self.account = account
        self.kind = kind
    }

    public var description: String {
        kind == .token ? "\(provider)/\(account)" : "\(provider)/\(account) (\(kind.rawValue))"
    }
}

/// Whether the provider still accepts the item, as far as the daemon knows.
public enum ItemStatus: String, Sendable {
    case ok
    case needsReauth = "needs-reauth"
}

/// An item as a store keeps it: plaintext metadata to list and schedule,
/// and the sealed secrets. Never holds plaintext secrets.
public struct StoredItem: Sendable, Equatable {
    public var key: ItemKey
    public var mode: AccessMode
    /// Expiry of the access token (Unix seconds), nil when unknown.
    public var expiresAt: Double?
    public var status: ItemStatus
    public var createdAt: Double
    public var updatedAt: Double
    /// `AEAD` box of the secrets, with `ItemSeal.associatedData` bound in.
    public var sealed: [UInt8]

    public init(key: ItemKey, mode: AccessMode, expiresAt: Double?, status: ItemStatus, createdAt: Double, updatedAt: Double, sealed: [UInt8]) {
        self.key = key
        self.mode = mode
        self.expiresAt = expiresAt
        self.status = status
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.sealed = sealed
    }
}

/// One atomic change to a store: all of it lands, or none of it.
public struct StoreChange: Sendable {
    public var putItems: [StoredItem] = []
    public var deleteItems: [ItemKey] = []
    /// Key-hierarchy records (wrapped class keys, KDF parameters) to write.
    public var putRecords: [String: [UInt8]] = [:]
    public var deleteRecords: [String] = []

    public init(putItems: [StoredItem] = [], deleteItems: [ItemKey] = [], putRecords: [String: [UInt8]] = [:], deleteRecords: [String] = []) {
        self.putItems = putItems
        self.deleteItems = deleteItems
        self.putRecords = putRecords
        self.deleteRecords = deleteRecords
    }
}

/// Where sealed items and the wrapped keys live. The SQLite store and the
/// Secret Service store implement it; nothing above it knows which one it
/// talks to. Implementations are safe to call from any thread and make
/// every `apply` atomic and durable before returning.
public protocol ItemStore: AnyObject, Sendable {
    /// `"sqlite"` or `"secret-service"`.
    var backendName: String { get }
    /// Where it lives, for `vaultctl status` (a path, a collection).
    var location: String { get }
    /// Every item.
    func allItems() throws(VaultError) -> [StoredItem]
    /// Every key-hierarchy record.
    func records() throws(VaultError) -> [String: [UInt8]]
    /// Applies `change` atomically and durably.
    func apply(_ change: StoreChange) throws(VaultError)
    /// Removes every item and record of this store (the source after a
    /// migration, or a half-made copy after a failed one). The store is not
    /// used afterwards.
    func destroy() throws(VaultError)
}
