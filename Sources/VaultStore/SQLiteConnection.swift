@preconcurrency import Glibc
internal import CSQLite
import VaultModel

/// `SQLITE_TRANSIENT`, which Swift cannot import: SQLite copies bound data.
private let SQLITE_TRANSIENT = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// An open SQLite database (`sqlite3*`), closed in `deinit`.
///
/// Thread safety: none of its own; `SQLiteStore` serialises every use.
final class SQLiteConnection {
    private let db: OpaquePointer
    /// The file, for error messages.
    let path: String

    /// Opens or creates `path` (calls `sqlite3_open_v2`).
    init(path: String) throws(VaultError) {
        self.path = path
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let handle { sqlite3_close_v2(handle) }
            throw VaultError(.failure, "cannot open store \(path): \(message)")
        }
        db = handle
        sqlite3_extended_result_codes(db, 1)
    }

    deinit {
        sqlite3_close_v2(db)
    }

    /// The error for result code `rc` while doing `what`.
    func error(_ rc: Int32, _ what: String) -> VaultError {
        let primary = rc & 0xFF
        let message = String(cString: sqlite3_errmsg(db))
        switch primary {
        case SQLITE_FULL:
            return VaultError(.failure, "store \(path) is on a full disk: \(what) failed and was rolled back; nothing stored before was lost")
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return VaultError(.failure, "store \(path) is corrupt or not a TokenVault store (\(what): \(message))")
        case SQLITE_IOERR:
            return VaultError(.failure, "I/O error on store \(path) during \(what): \(message)")
        case SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_PERM:
            return VaultError(.failure, "cannot write store \(path) during \(what): \(message)")
        case SQLITE_BUSY, SQLITE_LOCKED:
            return VaultError(.temporary, "store \(path) is busy (another process holds it) during \(what)")
        default:
            return VaultError(.failure, "store \(path): \(what) failed: \(message)")
        }
    }

    /// Runs SQL without results (calls `sqlite3_exec`).
    func execute(_ sql: String) throws(VaultError) {
        let rc = sqlite3_exec(db, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(rc, "executing \(sql.prefix(40))") }
    }

    /// Prepares one statement (calls `sqlite3_prepare_v3`).
    func prepare(_ sql: String) throws(VaultError) -> SQLiteStatement {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(db, sql, -1, 0, &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error(rc, "preparing \(sql.prefix(40))") }
        return SQLiteStatement(stmt, connection: self)
    }

    /// The single integer a query returns, such as a `PRAGMA`.
    func scalarInt(_ sql: String) throws(VaultError) -> Int64 {
        let s = try prepare(sql)
        guard try s.step() else { return 0 }
        return s.int(0)
    }

    /// The single text a query returns.
    func scalarText(_ sql: String) throws(VaultError) -> String? {
        let s = try prepare(sql)
        guard try s.step() else { return nil }
        return s.text(0)
    }

    /// Runs `body` in one `BEGIN IMMEDIATE … COMMIT` transaction, rolled back on error.
    func transaction<R>(_ what: String, _ body: () throws(VaultError) -> R) throws(VaultError) -> R {
        try execute("BEGIN IMMEDIATE")
        do throws(VaultError) {
            let r = try body()
            let rc = sqlite3_exec(db, "COMMIT", nil, nil, nil)
            guard rc == SQLITE_OK else { throw error(rc, what) }
            return r
        } catch {
            sqlite3_exec(db, "ROLLBACK", nil, nil, nil)
            throw error
        }
    }

    /// Rows changed by the last statement (`sqlite3_changes`).
    var changes: Int { Int(sqlite3_changes(db)) }
}

/// A prepared statement (`sqlite3_stmt*`), finalized in `deinit`.
final class SQLiteStatement {
    private let stmt: OpaquePointer
    private let connection: SQLiteConnection

    init(_ stmt: OpaquePointer, connection: SQLiteConnection) {
        self.stmt = stmt
        self.connection = connection
    }

    deinit { sqlite3_finalize(stmt) }

    /// Binds parameters 1… in order (calls `sqlite3_bind_*`). Bound values
    /// never appear in errors.
    func bind(_ values: [SQLiteValue]) throws(VaultError) {
        sqlite3_reset(stmt)
        sqlite3_clear_bindings(stmt)
        for (i, v) in values.enumerated() {
            let idx = Int32(i + 1)
            let rc: Int32
            switch v {
            case .null: rc = sqlite3_bind_null(stmt, idx)
            case .int(let n): rc = sqlite3_bind_int64(stmt, idx, n)
            case .double(let d): rc = sqlite3_bind_double(stmt, idx, d)
            case .text(let s): rc = sqlite3_bind_text(stmt, idx, s, -1, SQLITE_TRANSIENT)
            case .blob(let b): rc = b.withUnsafeBytes { sqlite3_bind_blob(stmt, idx, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) }
            }
            guard rc == SQLITE_OK else { throw connection.error(rc, "binding parameter \(idx)") }
        }
    }

    /// Steps once (calls `sqlite3_step`): true when a row is ready, false when done.
    func step() throws(VaultError) -> Bool {
        let rc = sqlite3_step(stmt)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw connection.error(rc, "statement")
    }

    /// Binds and runs a statement that returns no rows.
    func run(_ values: [SQLiteValue]) throws(VaultError) {
        try bind(values)
        while try step() {}
    }

    func isNull(_ col: Int32) -> Bool { sqlite3_column_type(stmt, col) == SQLITE_NULL }
    func int(_ col: Int32) -> Int64 { sqlite3_column_int64(stmt, col) }
    func double(_ col: Int32) -> Double { sqlite3_column_double(stmt, col) }
    func text(_ col: Int32) -> String {
        guard let p = sqlite3_column_text(stmt, col) else { return "" }
        return String(cString: p)
    }
    func blob(_ col: Int32) -> [UInt8] {
        let n = Int(sqlite3_column_bytes(stmt, col))
        guard n > 0, let p = sqlite3_column_blob(stmt, col) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: n))
    }
}

/// A value bound to a statement parameter.
enum SQLiteValue {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
    case blob([UInt8])
}
