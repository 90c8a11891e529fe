import VaultCrypto
import VaultDBus
import VaultModel
import VaultStore

/// The Secret Service store: every sealed item, key-hierarchy record and
/// (for a vault without a passphrase) the vault key is one item of the
/// schema `org.tokenvault.Item` in the default collection, tagged with the
/// vault's id. The item's secret is the sealed blob as raw bytes
/// (`application/octet-stream`); attributes hold only metadata (see
/// `Attribute`), never a secret.
///
/// Calls never unlock and never prompt: a locked collection answers
/// `locked` (reads and writes alike), never "not found", and nothing is
/// deleted. Each call runs on the store's own `BlockingWorker` and has a
/// deadline (`timeout`, 5 s by default), so a hung service gives
/// `temporary`, not a hang.
///
/// Atomicity, as far as the Secret Service allows (it has no
/// transactions): `apply` first creates the new copy of every item and
/// record it writes, and deletes the old copies and the deleted items
/// last. A crash in between leaves two copies of an identity; readers take
/// the newest (`updated`, then the item path's number). Key records carry
/// the id and size of the change that wrote them (`txn`, `txn_size`) and
/// the records it deletes (`txn_deletes`): a reader takes a record's newest
/// copy from a change that landed completely, so a change to the key
/// records cut short leaves the previous records in force.
///
/// Thread safety: safe from any thread; every libsecret call goes through
/// the worker, one at a time.
public final class SecretServiceStore: ItemStore {
    public let backendName = "secret-service"
    public let location: String
    /// The `vault` attribute of this vault's items.
    public let vaultID: String
    /// The default collection's object path.
    public let collectionPath: String
    let timeout: Duration
    let worker: BlockingWorker
    let connection: SecretServiceConnection

    /// Attribute names of the schema.
    enum Attribute {
        static let schema = "xdg:schema"
        static let vault = "vault"
        static let kind = "kind"
        static let provider = "provider"
        static let account = "account"
        static let name = "name"
        static let mode = "mode"
        static let expiresAt = "expires_at"
        static let status = "status"
        static let created = "created"
        static let updated = "updated"
        static let txn = "txn"
        static let txnSize = "txn_size"
        static let txnDeletes = "txn_deletes"
    }

    /// The schema name, also in `xdg:schema`.
    public static let schemaName = "org.tokenvault.Item"
    /// `kind` of a key-hierarchy record.
    static let recordKind = "vault-record"
    /// `kind` of the vault key of a vault without a passphrase.
    static let vaultKeyKind = "vault-key"

    /// Connects to the Secret Service on the session bus and finds the
    /// default collection. `unavailable` when there is no service or no
    /// default collection.
    public init(vaultID: String, timeout: Duration = .seconds(5)) throws(VaultError) {
        guard StoreMarker.isValidVaultID(vaultID) else { throw VaultError(.usage, "vault id must be 32 lowercase hex digits") }
        self.vaultID = vaultID
        self.timeout = timeout
        let worker = BlockingWorker(label: "tokenvault.secret-service", serviceName: "the Secret Service")
        self.worker = worker
        let ms = Int32(clamping: timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        let conn = try worker.run("connecting", timeout: timeout) { () throws(VaultError) in try SecretServiceConnection(callTimeoutMs: ms) }
        connection = conn
        guard let path = try worker.run("finding the default collection", timeout: timeout, { () throws(VaultError) in try conn.collection(alias: "default") }) else {
            throw VaultError(.unavailable, "the Secret Service has no default collection (no login keyring to keep the vault in)")
        }
        collectionPath = path
        location = "Secret Service collection \(path) (vault \(vaultID))"
    }

    // MARK: - Reading

    /// This vault's items in the default collection; `loadSecrets` reads the
    /// secrets of the unlocked ones.
    func found(loadSecrets: Bool, kind: String? = nil) throws(VaultError) -> [FoundItem] {
        var query = [Attribute.vault: vaultID]
        if let kind { query[Attribute.kind] = kind }
        let conn = connection
        let prefix = collectionPath + "/"
        let q = query
        return try worker.run("searching", timeout: timeout) { () throws(VaultError) in
            try conn.search(q, loadSecrets: loadSecrets).filter { $0.path.hasPrefix(prefix) }
        }
    }

    private func lockedError(_ what: String) -> VaultError {
        VaultError(.locked, "the Secret Service collection \(collectionPath) is locked, so \(what) cannot be read; unlock it (log in, or unlock the login keyring)")
    }

    /// The item's secret, or `locked`.
    private func secret(of item: FoundItem, _ what: String) throws(VaultError) -> [UInt8] {
        guard !item.locked else { throw lockedError(what) }
        guard let secret = item.secret else { throw VaultError(.failure, "the Secret Service gave no secret for \(what) (\(item.path))") }
        return secret
    }

    /// Orders two copies of one identity: the newer first.
    static func isNewer(_ a: FoundItem, than b: FoundItem) -> Bool {
        let ua = Double(a.attributes[Attribute.updated] ?? "") ?? 0, ub = Double(b.attributes[Attribute.updated] ?? "") ?? 0
        if ua != ub { return ua > ub }
        return pathNumber(a.path) > pathNumber(b.path)
    }

    /// The trailing number of an item path (`…/collection/login/12` → 12).
    static func pathNumber(_ path: String) -> Int {
        Int(path.split(separator: "/").last ?? "") ?? 0
    }

    public func allItems() throws(VaultError) -> [StoredItem] {
        var newest: [ItemKey: FoundItem] = [:]
        for f in try found(loadSecrets: true) {
            guard let key = Self.itemKey(f.attributes) else { continue }
            if let other = newest[key], !Self.isNewer(f, than: other) { continue }
            newest[key] = f
        }
        var out: [StoredItem] = []
        out.reserveCapacity(newest.count)
        for (key, f) in newest {
            let a = f.attributes
            guard let modeText = a[Attribute.mode], let mode = AccessMode(rawValue: modeText) else {
                throw VaultError(.failure, "\(location): item \(key) has no valid mode attribute")
            }
            out.append(StoredItem(key: key, mode: mode, expiresAt: a[Attribute.expiresAt].flatMap(Double.init),
                                  status: ItemStatus(rawValue: a[Attribute.status] ?? "") ?? .ok,
                                  createdAt: Double(a[Attribute.created] ?? "") ?? 0, updatedAt: Double(a[Attribute.updated] ?? "") ?? 0,
                                  sealed: try secret(of: f, "item \(key)")))
        }
        return out.sorted { ($0.key.provider, $0.key.account, $0.key.kind.rawValue) < ($1.key.provider, $1.key.account, $1.key.kind.rawValue) }
    }

    /// The identity of a token or client-secret item from its attributes.
    static func itemKey(_ a: [String: String]) -> ItemKey? {
        guard let kindText = a[Attribute.kind], let kind = ItemKind(rawValue: kindText),
              let provider = a[Attribute.provider], let account = a[Attribute.account] else { return nil }
        return ItemKey(provider: provider, account: account, kind: kind)
    }

    public func records() throws(VaultError) -> [String: [UInt8]] {
        let copies = try found(loadSecrets: true, kind: Self.recordKind)
        var out: [String: [UInt8]] = [:]
        for (name, f) in Self.resolveRecords(copies) { out[name] = try secret(of: f, "key record \(name)") }
        return out
    }

    /// Picks each record's copy in force: with one copy, that one; with
    /// several, the newest from a change that landed completely, else the
    /// oldest (a change cut short does not count). A record that a complete
    /// change newer than all its copies deletes is gone.
    static func resolveRecords(_ copies: [FoundItem]) -> [String: FoundItem] {
        var perTxn: [String: Int] = [:]
        for c in copies { if let t = c.attributes[Attribute.txn] { perTxn[t, default: 0] += 1 } }
        func complete(_ c: FoundItem) -> Bool {
            guard let t = c.attributes[Attribute.txn], let size = Int(c.attributes[Attribute.txnSize] ?? "") else { return true }
            return (perTxn[t] ?? 0) >= size
        }
        var byName: [String: [FoundItem]] = [:]
        for c in copies { if let name = c.attributes[Attribute.name] { byName[name, default: []].append(c) } }
        var out: [String: FoundItem] = [:]
        for (name, list) in byName {
            let sorted = list.sorted { isNewer($0, than: $1) }
            out[name] = list.count == 1 ? list[0] : (sorted.first(where: complete) ?? sorted.last!)
        }
        // Deletions carried by complete changes.
        for c in copies where complete(c) {
            guard let deletes = c.attributes[Attribute.txnDeletes], !deletes.isEmpty else { continue }
            for name in deletes.split(separator: ",").map(String.init) {
                if let current = out[name], isNewer(c, than: current) { out[name] = nil }
            }
        }
        return out
    }

    // MARK: - Writing

    /// Throws `locked` when the default collection is locked.
    func requireUnlocked(_ what: String) throws(VaultError) {
        let conn = connection, path = collectionPath
        let locked = try worker.run("checking the lock", timeout: timeout) { () throws(VaultError) in try conn.isLocked(collection: path) }
        if locked {
            throw VaultError(.locked, "the Secret Service collection \(path) is locked, so \(what) was refused and nothing was written; unlock it (log in, or unlock the login keyring)")
        }
    }

    /// Whether the default collection is locked now.
    public func isLocked() throws(VaultError) -> Bool {
        let conn = connection, path = collectionPath
        return try worker.run("checking the lock", timeout: timeout) { () throws(VaultError) in try conn.isLocked(collection: path) }
    }

    private func create(label: String, attributes: [String: String], secret: [UInt8], _ what: String) throws(VaultError) -> String {
        let conn = connection, path = collectionPath
        var attrs = attributes
        attrs[Attribute.schema] = Self.schemaName
        attrs[Attribute.vault] = vaultID
        let a = attrs
        return try worker.run("storing \(what)", timeout: timeout) { () throws(VaultError) in
            try conn.create(in: path, label: label, attributes: a, secret: secret)
        }
    }

    private func delete(_ path: String) throws(VaultError) {
        let conn = connection
        try worker.run("deleting an item", timeout: timeout) { () throws(VaultError) in try conn.delete(path) }
    }

    static func number(_ d: Double) -> String { "\(d)" }

    public func apply(_ change: StoreChange) throws(VaultError) {
        if change.putItems.isEmpty && change.deleteItems.isEmpty && change.putRecords.isEmpty && change.deleteRecords.isEmpty { return }
        try requireUnlocked("saving \(change.putItems.count + change.deleteItems.count) item(s)")
        // Old copies, found before anything is written.
        var itemPaths: [ItemKey: [String]] = [:]
        var recordPaths: [String: [String]] = [:]
        for f in try found(loadSecrets: false) {
            if let key = Self.itemKey(f.attributes) {
                itemPaths[key, default: []].append(f.path)
            } else if f.attributes[Attribute.kind] == Self.recordKind, let name = f.attributes[Attribute.name] {
                recordPaths[name, default: []].append(f.path)
            }
        }
        let now = Self.number(WallClock.now())
        let txn = String(StoreMarker.newVaultID().prefix(16))
        var created: [String] = []
        do throws(VaultError) {
            for item in change.putItems {
                var a = [Attribute.kind: item.key.kind.rawValue, Attribute.provider: item.key.provider, Attribute.account: item.key.account,
                         Attribute.mode: item.mode.rawValue, Attribute.status: item.status.rawValue,
                         Attribute.created: Self.number(item.createdAt), Attribute.updated: Self.number(item.updatedAt)]
                if let e = item.expiresAt { a[Attribute.expiresAt] = Self.number(e) }
                created.append(try create(label: "TokenVault \(item.key)", attributes: a, secret: item.sealed, "item \(item.key)"))
            }
            let deletes = change.deleteRecords.sorted().joined(separator: ",")
            for (name, value) in change.putRecords.sorted(by: { $0.key < $1.key }) {
                let a = [Attribute.kind: Self.recordKind, Attribute.name: name, Attribute.updated: now, Attribute.txn: txn,
                         Attribute.txnSize: "\(change.putRecords.count)", Attribute.txnDeletes: deletes]
                created.append(try create(label: "TokenVault key record \(name)", attributes: a, secret: value, "key record \(name)"))
            }
        } catch {
            // Take back the new copies: the old ones were never touched.
            for path in created { try? delete(path) }
            throw error
        }
        // Delete last: what the change deletes must go (an error says so);
        // a replaced copy that survives is older and loses to the new one.
        for key in change.deleteItems { for path in itemPaths[key] ?? [] { try delete(path) } }
        for name in change.deleteRecords { for path in recordPaths[name] ?? [] { try delete(path) } }
        for item in change.putItems { for path in itemPaths[item.key] ?? [] { try? delete(path) } }
        for name in change.putRecords.keys { for path in recordPaths[name] ?? [] { try? delete(path) } }
    }

    /// Deletes every item of this vault, the vault key included.
    public func destroy() throws(VaultError) {
        for f in try found(loadSecrets: false) { try delete(f.path) }
    }

    // MARK: - The vault key

    /// The vault key of a vault without a passphrase, or nil; `locked` when the collection is.
    func loadVaultKey() throws(VaultError) -> [UInt8]? {
        let copies = try found(loadSecrets: true, kind: Self.vaultKeyKind)
        guard let newest = copies.sorted(by: { Self.isNewer($0, than: $1) }).first else { return nil }
        return try secret(of: newest, "the vault key")
    }

    /// Stores the vault key, then removes older copies.
    func saveVaultKey(_ bytes: [UInt8]) throws(VaultError) {
        try requireUnlocked("storing the vault key")
        let old = try found(loadSecrets: false, kind: Self.vaultKeyKind)
        _ = try create(label: "TokenVault vault key", attributes: [Attribute.kind: Self.vaultKeyKind, Attribute.updated: Self.number(WallClock.now())],
                       secret: bytes, "the vault key")
        for f in old { try? delete(f.path) }
    }

    /// Removes the vault key item(s).
    func removeVaultKey() throws(VaultError) {
        for f in try found(loadSecrets: false, kind: Self.vaultKeyKind) { try delete(f.path) }
    }
}

/// The vault key of a vault without a passphrase, kept as an item of kind
/// `vault-key` in the login collection: the user's login is the vault's
/// first unlock, and a locked collection keeps the key out of reach.
public struct SecretServiceVaultKey: VaultKeyLocation {
    let store: SecretServiceStore

    public init(store: SecretServiceStore) { self.store = store }

    public var description: String { "vault key item in \(store.location)" }

    public func load() throws(VaultError) -> SecretKey? {
        guard var bytes = try store.loadVaultKey() else { return nil }
        defer { secureZero(&bytes) }
        guard bytes.count == SecretKey.byteCount else { throw VaultError(.failure, "\(description) is damaged (\(bytes.count) bytes, expected \(SecretKey.byteCount))") }
        do { return try SecretKey(SecureBytes(copying: bytes)) } catch { throw VaultError(.failure, "cannot hold the vault key in guarded memory: \(error)") }
    }

    public func save(_ key: SecretKey) throws(VaultError) {
        var bytes = key.withUnsafeBytes { Array($0) }
        defer { secureZero(&bytes) }
        try store.saveVaultKey(bytes)
    }

    public func remove() throws(VaultError) { try store.removeVaultKey() }
}
