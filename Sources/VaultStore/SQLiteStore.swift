@preconcurrency import Glibc
import Synchronization
import VaultModel
import VaultSystem

/// The SQLite store: one file in WAL mode with `synchronous=FULL`, schema
/// migrations by `PRAGMA user_version`, one transaction per logical change.
///
/// Metadata (provider, account, kind, mode, expiry, status) is plaintext so
/// the daemon can list and schedule; secrets are only ever sealed blobs.
/// Thread safety: every use of the connection goes through `connection`'s
/// mutex, so the store may be called from any thread.
public final class SQLiteStore: ItemStore {
    public let backendName = "sqlite"
    public let location: String
    private let connection: Mutex<SQLiteConnection>

    /// Schema migrations, applied in order; index + 1 is the `user_version`.
    static let migrations: [String] = [
        """
        CREATE TABLE items (
            provider   TEXT NOT NULL,
            account    TEXT NOT NULL,
            kind       TEXT NOT NULL,
            mode       TEXT NOT NULL,
            expires_at REAL,
            status     TEXT NOT NULL DEFAULT 'ok',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            sealed     BLOB NOT NULL,
            PRIMARY KEY (provider, account, kind)
        );
        CREATE TABLE vault_records (
            name  TEXT PRIMARY KEY,
            value BLOB NOT NULL
        );
        """,
    ]

    /// Opens or creates the store at `path` (folder created 0700, file 0600).
    public init(path: String) throws(VaultError) {
        location = path
        do {
            try FileSystem.makeFolders(FileSystem.parent(of: path))
        } catch {
            throw VaultError(.failure, "cannot create the folder of store \(path): \(error)")
        }
        // Create the file 0600 before SQLite does; its -wal and -shm copy the mode.
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw VaultError(.failure, "cannot open store \(path): \(SystemError("open", path))") }
        close(fd)
        let db = try SQLiteConnection(path: path)
        try db.execute("PRAGMA busy_timeout = 5000")
        let journal = try db.scalarText("PRAGMA journal_mode = WAL")
        guard journal == "wal" else { throw VaultError(.failure, "store \(path) could not switch to WAL (journal_mode is \(journal ?? "?"))") }
        try db.execute("PRAGMA synchronous = FULL")
        try db.execute("PRAGMA secure_delete = ON")
        try Self.migrate(db)
        connection = Mutex(db)
    }

    private static func migrate(_ db: SQLiteConnection) throws(VaultError) {
        let version = Int(try db.scalarInt("PRAGMA user_version"))
        guard version <= migrations.count else {
            throw VaultError(.failure, "store \(db.path) has schema version \(version), newer than this TokenVault knows (\(migrations.count))")
        }
        for v in version..<migrations.count {
            try db.transaction("migrating the schema to version \(v + 1)") { () throws(VaultError) in
                try db.execute(migrations[v])
                try db.execute("PRAGMA user_version = \(v + 1)")
            }
        }
    }

    /// The schema version of the open file.
    public func schemaVersion() throws(VaultError) -> Int {
        try connection.withLock { db throws(VaultError) in Int(try db.scalarInt("PRAGMA user_version")) }
    }

    public func allItems() throws(VaultError) -> [StoredItem] {
        try connection.withLock { db throws(VaultError) -> [StoredItem] in
            let s = try db.prepare("SELECT provider, account, kind, mode, expires_at, status, created_at, updated_at, sealed FROM items ORDER BY provider, account, kind")
            var out: [StoredItem] = []
            while try s.step() {
                let kindText = s.text(2), modeText = s.text(3), statusText = s.text(5)
                let where_ = "\(s.text(0))/\(s.text(1))"
                guard let kind = ItemKind(rawValue: kindText) else { throw VaultError(.failure, "store \(db.path): item \(where_) has unknown kind \"\(ItemName.printable(kindText))\"") }
                guard let mode = AccessMode(rawValue: modeText) else { throw VaultError(.failure, "store \(db.path): item \(where_) has unknown mode \"\(ItemName.printable(modeText))\"") }
                let status = ItemStatus(rawValue: statusText) ?? .ok
                out.append(StoredItem(key: ItemKey(provider: s.text(0), account: s.text(1), kind: kind), mode: mode,
                                      expiresAt: s.isNull(4) ? nil : s.double(4), status: status,
                                      createdAt: s.double(6), updatedAt: s.double(7), sealed: s.blob(8)))
            }
            return out
        }
    }

    public func records() throws(VaultError) -> [String: [UInt8]] {
        try connection.withLock { db throws(VaultError) -> [String: [UInt8]] in
            let s = try db.prepare("SELECT name, value FROM vault_records")
            var out: [String: [UInt8]] = [:]
            while try s.step() { out[s.text(0)] = s.blob(1) }
            return out
        }
    }

    public func apply(_ change: StoreChange) throws(VaultError) {
        try connection.withLock { db throws(VaultError) in
            try db.transaction("saving \(change.putItems.count + change.deleteItems.count) item(s)") { () throws(VaultError) in
                if !change.putItems.isEmpty {
                    let put = try db.prepare("""
                        INSERT INTO items (provider, account, kind, mode, expires_at, status, created_at, updated_at, sealed)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (provider, account, kind) DO UPDATE SET
                          mode = excluded.mode, expires_at = excluded.expires_at, status = excluded.status,
                          updated_at = excluded.updated_at, sealed = excluded.sealed
                        """)
                    for item in change.putItems {
                        try put.run([.text(item.key.provider), .text(item.key.account), .text(item.key.kind.rawValue),
                                     .text(item.mode.rawValue), item.expiresAt.map { .double($0) } ?? .null,
                                     .text(item.status.rawValue), .double(item.createdAt), .double(item.updatedAt), .blob(item.sealed)])
                    }
                }
                if !change.deleteItems.isEmpty {
                    let del = try db.prepare("DELETE FROM items WHERE provider = ? AND account = ? AND kind = ?")
                    for key in change.deleteItems {
                        try del.run([.text(key.provider), .text(key.account), .text(key.kind.rawValue)])
                    }
                }
                if !change.putRecords.isEmpty {
                    let put = try db.prepare("INSERT INTO vault_records (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value")
                    for (name, value) in change.putRecords.sorted(by: { $0.key < $1.key }) { try put.run([.text(name), .blob(value)]) }
                }
                if !change.deleteRecords.isEmpty {
                    let del = try db.prepare("DELETE FROM vault_records WHERE name = ?")
                    for name in change.deleteRecords { try del.run([.text(name)]) }
                }
            }
        }
    }

    /// Deletes the database file and its `-wal` and `-shm` (the connection
    /// then writes to an unlinked file, so the store must not be used again).
    public func destroy() throws(VaultError) {
        for path in [location, location + "-wal", location + "-shm"] { try FileSystemShim.remove(path) }
        FileSystem.syncFolder(of: location)
    }

    /// `PRAGMA integrity_check`: "ok" or the problems found.
    public func integrityCheck() throws(VaultError) -> String {
        try connection.withLock { db throws(VaultError) in try db.scalarText("PRAGMA integrity_check") ?? "" }
    }

    /// Moves the WAL into the main file (`PRAGMA wal_checkpoint(TRUNCATE)`).
    public func checkpoint() throws(VaultError) {
        try connection.withLock { db throws(VaultError) in try db.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
    }
}
