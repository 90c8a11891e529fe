// vault-crash-writer FOLDER
//
// Test helper for the crash-safety test: opens the SQLite store and a vault
// without a passphrase in FOLDER and writes items until it is killed.
// After every write has returned (committed), it prints one line to
// standard output, unbuffered (one write(2) per line):
//
//   ready N            the vault opened; items start at index N
//   put ACCOUNT V      item crash/ACCOUNT now holds version V
//   deleting ACCOUNT   (before the delete) item crash/ACCOUNT may be gone from now on
//   del ACCOUNT        item crash/ACCOUNT is deleted
//
// The secrets of ACCOUNT at version V are `secret(ACCOUNT, V)`, which the
// test recomputes. Indexes resume after the highest one already stored,
// so a deleted account is never written again.
@preconcurrency import Glibc
import VaultStore
import VaultSystem

/// The provider of every item.
let provider = "crash"
/// The machine identity the test opens the vault with too.
let machineID = "crash-writer-machine"
/// A bound, so a writer that nobody kills still ends.
let maximumWrites = 200_000

func account(_ index: Int) -> String { "acct-\(index)" }

/// The sealed text of `account` at `version`: the account, the version and padding.
func secret(_ account: String, _ version: Int) -> [UInt8] {
    Array("s:\(account):v\(version):".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: 200)
}

/// Writes one line with a single write(2); any failure (the test went away) ends the process.
func emit(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    let n = bytes.withUnsafeBytes { p in retryOnInterrupt { write(1, p.baseAddress, p.count) } }
    if n != bytes.count { exit(3) }
}

func fail(_ message: String) -> Never {
    let bytes = Array("vault-crash-writer: \(message)\n".utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(1)
}

guard CommandLine.arguments.count == 2 else { fail("usage: vault-crash-writer FOLDER") }
let folder = CommandLine.arguments[1]

do {
    let store = try SQLiteStore(path: folder + "/vault.db")
    let vault = try Vault(store: store, keyFiles: KeyFiles(folder: folder), machineID: machineID, kdfParameters: .minimumForTests)
    var start = 0
    for (item, _) in vault.list() where item.key.provider == provider {
        guard let index = Int(item.key.account.dropFirst("acct-".count)) else { fail("unexpected account \(item.key.account)") }
        start = max(start, index + 1)
    }
    emit("ready \(start)")
    for i in start..<(start + maximumWrites) {
        try vault.put(ItemKey(provider: provider, account: account(i)), mode: .afterFirstUnlock, secrets: secret(account(i), 1), expiresAt: nil)
        emit("put \(account(i)) 1")
        if i % 5 == 0 && i - 1 >= start {
            // Overwrite the previous item.
            try vault.put(ItemKey(provider: provider, account: account(i - 1)), mode: .afterFirstUnlock, secrets: secret(account(i - 1), 2), expiresAt: nil)
            emit("put \(account(i - 1)) 2")
        }
        if i % 7 == 0 && i - 3 >= start {
            emit("deleting \(account(i - 3))")
            guard try vault.delete(ItemKey(provider: provider, account: account(i - 3))) else { fail("\(account(i - 3)) was not there to delete") }
            emit("del \(account(i - 3))")
        }
    }
} catch {
    fail("\(error)")
}
