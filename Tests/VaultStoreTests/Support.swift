@preconcurrency import Glibc
import Foundation
import Synchronization
import Testing
import VaultCrypto
import VaultModel
import VaultStore

/// A failure of the test's own plumbing (a tool that would not run).
struct TestSetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The machine identity the tests pretend to run on.
let thisMachine = "test-machine-0001"

/// Runs `body` with a fresh folder made by `mkdtemp` under /tmp, removed afterwards.
func withTemporaryFolder<R>(_ body: (String) throws -> R) throws -> R {
    var template = Array("/tmp/tokenvault-test.XXXXXX".utf8CString)
    guard let folder = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!).map { String(cString: $0) } }) else {
        throw TestSetupError("mkdtemp: \(String(cString: strerror(errno)))")
    }
    defer { try? FileManager.default.removeItem(atPath: folder) }
    return try body(folder)
}

/// The files of one vault in a folder: `vault.db` (with `-wal`, `-shm`), `device.key`, `vault.key`.
struct VaultFolder {
    let path: String
    var database: String { path + "/vault.db" }
    var keyFiles: KeyFiles { KeyFiles(folder: path) }
    /// Every file that holds vault data or keys.
    var allFiles: [String] { [database, database + "-wal", database + "-shm", keyFiles.deviceKeyPath, keyFiles.vaultKeyPath] }

    /// Opens the store and a vault over it, as a daemon start does.
    func open(machineID: String = thisMachine, kdf: PasswordHash.Parameters = .minimumForTests) throws(VaultError) -> (SQLiteStore, Vault) {
        let store = try SQLiteStore(path: database)
        return (store, try Vault(store: store, keyFiles: keyFiles, machineID: machineID, kdfParameters: kdf))
    }

    /// A fresh start: a new store connection and vault on the same files.
    func reopen(machineID: String = thisMachine) throws(VaultError) -> Vault { try open(machineID: machineID).1 }
}

/// Runs `body` with a `VaultFolder` in a fresh temporary folder.
func withVaultFolder<R>(_ body: (VaultFolder) throws -> R) throws -> R {
    try withTemporaryFolder { try body(VaultFolder(path: $0)) }
}

/// A passphrase in guarded memory.
func passphrase(_ text: String) throws -> SecureBytes { try SecureBytes(copying: Array(text.utf8)) }

/// The `VaultError` that `body` throws, or nil; any other error is a test failure.
func vaultError(_ body: () throws -> Void) -> VaultError? {
    do {
        try body()
    } catch let error as VaultError {
        return error
    } catch {
        Issue.record("expected a VaultError, got \(type(of: error)): \(error)")
    }
    return nil
}

extension Vault {
    /// The item's secrets as text.
    func secretText(_ key: ItemKey) throws(VaultError) -> String {
        try withSecrets(key) { (_, plain) throws(VaultError) -> String in String(decoding: plain, as: UTF8.self) }
    }

    /// Stores `text` as the item's secrets.
    @discardableResult
    func put(_ key: ItemKey, mode: AccessMode, text: String) throws(VaultError) -> StoredItem {
        try put(key, mode: mode, secrets: Array(text.utf8), expiresAt: WallClock.now() + 3600)
    }
}

/// An item key per access mode, for tests that store one item of each.
func itemKey(for mode: AccessMode, provider: String = "svc") -> ItemKey {
    ItemKey(provider: provider, account: mode.rawValue)
}

/// A long random ASCII token that cannot occur by chance in a file.
func distinctiveToken(_ prefix: String) -> String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
    var rng = SystemRandomNumberGenerator()
    return prefix + String((0..<48).map { _ in alphabet.randomElement(using: &rng)! })
}

/// Whether `needle` occurs in `haystack`.
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return needle.isEmpty }
    let first = needle[0]
    var i = 0
    let last = haystack.count - needle.count
    while i <= last {
        if haystack[i] == first && haystack[i..<(i + needle.count)].elementsEqual(needle) { return true }
        i += 1
    }
    return false
}

/// The whole file, or nil when it does not exist.
func fileBytes(_ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: path).map { [UInt8]($0) }
}

/// The path of a program found on `PATH` (or in the usual folders).
func findProgram(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let folders = path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
    return folders.map { $0 + "/" + name }.first { access($0, X_OK) == 0 }
}

/// Runs a program to completion; throws unless it exits 0. Returns its standard output.
@discardableResult
func run(_ program: String, _ arguments: [String], stdin: String? = nil) throws -> String {
    guard let executable = program.hasPrefix("/") ? program : findProgram(program) else {
        throw TestSetupError("\(program) is not installed")
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let out = Pipe(), err = Pipe(), input = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = input
    try process.run()
    if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
    try input.fileHandleForWriting.close()
    // Read standard error on another thread so neither pipe can fill up and block the child.
    let errData = Mutex(Data())
    let errDone = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        let data = err.fileHandleForReading.readDataToEndOfFile()
        errData.withLock { $0 = data }
        errDone.signal()
    }
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    errDone.wait()
    process.waitUntilExit()
    let output = String(decoding: outData, as: UTF8.self)
    guard process.terminationReason == .exit, process.terminationStatus == 0 else {
        throw TestSetupError("\(program) \(arguments.joined(separator: " ")) failed (\(process.terminationStatus)): \(String(decoding: errData.withLock { $0 }, as: UTF8.self))")
    }
    return output
}

/// A separate SQLite connection: the `sqlite3` command-line tool.
enum SQLiteCLI {
    /// Runs `sql` on `database`; returns the output without its final newline.
    @discardableResult
    static func execute(_ database: String, _ sql: String) throws -> String {
        let out = try run("sqlite3", ["-batch", "-bail", "-init", "/dev/null", database], stdin: sql + "\n")
        return out.hasSuffix("\n") ? String(out.dropLast()) : out
    }

    /// Single-quoted SQL text literal.
    static func quote(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }

    /// The `WHERE` clause that selects one item row.
    static func row(_ key: ItemKey) -> String {
        "provider = \(quote(key.provider)) AND account = \(quote(key.account)) AND kind = \(quote(key.kind.rawValue))"
    }

    /// An item's `sealed` blob, read by the other connection.
    static func sealed(_ database: String, _ key: ItemKey) throws -> [UInt8] {
        let text = try execute(database, "SELECT hex(sealed) FROM items WHERE \(row(key));")
        return try hexDecode(text)
    }

    /// SQL that sets an item's `sealed` blob.
    static func updateSealed(_ key: ItemKey, _ bytes: [UInt8]) -> String {
        "UPDATE items SET sealed = X'\(hexEncode(bytes))' WHERE \(row(key));"
    }

    static func hexEncode(_ bytes: [UInt8]) -> String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    static func hexDecode(_ text: String) throws -> [UInt8] {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0, !digits.isEmpty else { throw TestSetupError("not hex: \(text)") }
        return try stride(from: 0, to: digits.count, by: 2).map { i in
            guard let b = UInt8(String(decoding: digits[i...(i + 1)], as: UTF8.self), radix: 16) else { throw TestSetupError("not hex: \(text)") }
            return b
        }
    }
}

/// File permission bits.
enum FileSystemMode {
    /// The permission bits of `path` (`stat`), or nil.
    static func of(_ path: String) -> mode_t? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return st.st_mode & 0o777
    }
}
