@preconcurrency import Glibc
import Foundation
import Testing
import VaultCrypto
import VaultModel
@testable import VaultSecretService
import VaultStore

/// A vault in the private keyring: a fresh vault id, key files in a fresh folder.
struct KeyringVault {
    let folder: String
    let vaultID = StoreMarker.newVaultID()

    init() throws { folder = try makeTemporaryFolder() }

    func open() throws -> (SecretServiceStore, Vault) {
        let store = try SecretServiceStore(vaultID: vaultID)
        let keys = KeyFiles(folder: folder).keepingVaultKey(in: SecretServiceVaultKey(store: store))
        return (store, try Vault(store: store, keyFiles: keys, machineID: "ss-test-machine", kdfParameters: .minimumForTests))
    }

    func remove() { try? FileManager.default.removeItem(atPath: folder) }
}

extension Vault {
    func text(_ key: ItemKey) throws(VaultError) -> String {
        try withSecrets(key) { (_, plain) throws(VaultError) -> String in String(decoding: plain, as: UTF8.self) }
    }
}

func uniqueToken(_ prefix: String) -> String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
    var rng = SystemRandomNumberGenerator()
    return prefix + String((0..<40).map { _ in alphabet.randomElement(using: &rng)! })
}

/// Every test that touches the shared private keyring, one at a time (some
/// lock its collection).
@Suite("Secret Service", .serialized, .enabled(if: PrivateKeyring.toolsPresent, "needs dbus-run-session, gnome-keyring-daemon, gdbus and secret-tool (scripts/setup.sh --test)"))
struct SecretServiceTests {
    @Test func store_putReadDeleteAcrossReopen_keepsItemsInTheCollectionAndTheVaultKeyThereToo() throws {
        _ = try PrivateKeyring.get()
        let v = try KeyringVault()
        defer { v.remove() }
        let secrets = Dictionary(uniqueKeysWithValues: AccessMode.allCases.filter { $0 != .whenPasscodeSetThisDeviceOnly }.map { ($0, uniqueToken("tok_")) })
        do {
            let (_, vault) = try v.open()
            for (mode, token) in secrets { try vault.put(ItemKey(provider: "svc", account: mode.rawValue), mode: mode, secrets: Array(token.utf8), expiresAt: 2e9) }
            try vault.put(ItemKey(provider: "svc", account: "default", kind: .clientSecret), mode: .always, secrets: Array("cs".utf8), expiresAt: nil)
        }
        #expect(!FileManager.default.fileExists(atPath: v.folder + "/vault.key"), "the vault key lives in the collection, not in a file")
        #expect(FileManager.default.fileExists(atPath: v.folder + "/device.key"), "the device key stays in its 0600 file")
        let (store, vault) = try v.open()
        #expect(vault.lockState == .unlocked, "a vault without a passphrase opens from the key in the login collection")
        for (mode, token) in secrets {
            #expect(try vault.text(ItemKey(provider: "svc", account: mode.rawValue)) == token)
        }
        #expect(try vault.delete(ItemKey(provider: "svc", account: "always")))
        let again = try v.open().1
        #expect(again.item(ItemKey(provider: "svc", account: "always")) == nil)
        #expect(again.list().count == secrets.count)  // one token gone, the client secret added
        let found = try store.found(loadSecrets: false)
        #expect(found.filter { $0.attributes["kind"] == "vault-key" }.count == 1)
        try store.destroy()
        #expect(try store.found(loadSecrets: false).isEmpty)
    }

    @Test func secretTool_seesOurSchemaAndAttributes_andNoPlaintextToken() throws {
        let keyring = try PrivateKeyring.get()
        let v = try KeyringVault()
        defer { v.remove() }
        let token = uniqueToken("gho_")
        let (store, vault) = try v.open()
        defer { try? store.destroy() }
        try vault.put(ItemKey(provider: "github", account: "alice"), mode: .afterFirstUnlock,
                      secrets: Array("{\"access_token\":\"\(token)\",\"refresh_token\":\"\(token)r\"}".utf8), expiresAt: 1_900_000_000)
        let items = try keyring.search(["vault": v.vaultID, "provider": "github"])
        #expect(items.count == 1)
        let item = try #require(items.first)
        #expect(item["schema"] == "org.tokenvault.Item")
        #expect(item["account"] == "alice")
        #expect(item["kind"] == "token")
        #expect(item["mode"] == "after-first-unlock")
        #expect(item["expires_at"] == "1900000000.0")
        #expect(item["status"] == "ok")
        let raw = try keyring.rawSearchOutput(["vault": v.vaultID])
        #expect(!contains(raw, Array(token.utf8)), "no plaintext token anywhere secret-tool can see")
        let records = try keyring.search(["vault": v.vaultID, "kind": "vault-record"])
        #expect(Set(records.compactMap { $0["name"] }).isSuperset(of: ["vault.format", "class-key.always"]))
    }

    @Test(.timeLimit(.minutes(1)))
    func lockedCollection_answersLockedFast_deletesNothing_andServesAgainAfterUnlock() throws {
        let keyring = try PrivateKeyring.get()
        let v = try KeyringVault()
        defer { v.remove() }
        let (store, vault) = try v.open()
        defer { try? keyring.unlock(); try? store.destroy() }
        let key = ItemKey(provider: "lk", account: "a")
        try vault.put(key, mode: .whenUnlocked, secrets: Array("secret-1".utf8), expiresAt: nil)
        try vault.put(ItemKey(provider: "lk", account: "b"), mode: .always, secrets: Array("secret-2".utf8), expiresAt: nil)
        let before = try keyring.search(["vault": v.vaultID]).count
        try keyring.lock()
        defer { try? keyring.unlock() }

        var clock = ContinuousClock.now
        let putError = vaultError { try vault.put(ItemKey(provider: "lk", account: "c"), mode: .always, secrets: [1], expiresAt: nil) }
        #expect(putError?.code == .locked, "storing into a locked collection is refused as locked, got \(String(describing: putError))")
        #expect(ContinuousClock.now - clock < .seconds(1))
        clock = ContinuousClock.now
        #expect(vaultError { _ = try store.allItems() }?.code == .locked, "reading a locked collection is locked, never an empty list")
        #expect(vaultError { try vault.delete(key) }?.code == .locked, "deleting is refused too, and nothing is deleted")
        #expect(ContinuousClock.now - clock < .seconds(1))

        // A daemon start while locked: the vault waits, and answers locked, not "not found".
        let (_, waiting) = try v.open()
        #expect(waiting.status.waitingForStore)
        #expect(vaultError { _ = try waiting.lookup(key) }?.code == .locked)
        #expect(vaultError { _ = try waiting.text(key) }?.code == .locked)

        try keyring.unlock()
        #expect(try keyring.search(["vault": v.vaultID]).count == before, "nothing was deleted while locked")
        try waiting.unlock(passphrase: nil)
        #expect(try waiting.text(key) == "secret-1", "served again after the collection is unlocked")
        try vault.put(ItemKey(provider: "lk", account: "c"), mode: .always, secrets: [1], expiresAt: nil)
    }

    @Test func passphrase_setChangeRemove_keepsWorkingWithTheKeyInTheCollection() throws {
        _ = try PrivateKeyring.get()
        let v = try KeyringVault()
        defer { v.remove() }
        let (store, vault) = try v.open()
        defer { try? store.destroy() }
        let key = ItemKey(provider: "pp", account: "a")
        try vault.put(key, mode: .whenUnlocked, secrets: Array("pp-secret".utf8), expiresAt: nil)
        try vault.setPassphrase(try SecureBytes(copying: Array("one".utf8)))
        #expect(try store.loadVaultKey() == nil, "with a passphrase the vault key item is gone")
        let locked = try v.open().1
        #expect(locked.lockState == .lockedSinceStart)
        try locked.unlock(passphrase: try SecureBytes(copying: Array("one".utf8)))
        #expect(try locked.text(key) == "pp-secret")
        try locked.changePassphrase(old: try SecureBytes(copying: Array("one".utf8)), new: try SecureBytes(copying: Array("two".utf8)))
        try locked.removePassphrase(current: try SecureBytes(copying: Array("two".utf8)))
        #expect(try store.loadVaultKey()?.count == 32)
        let reopened = try v.open().1
        #expect(reopened.lockState == .unlocked)
        #expect(try reopened.text(key) == "pp-secret")
    }

    @Test func migration_sqliteToSecretServiceAndBack_movesEveryItemAndTheVaultKey() throws {
        _ = try PrivateKeyring.get()
        let v = try KeyringVault()
        defer { v.remove() }
        let sqlite = try SQLiteStore(path: v.folder + "/vault.db")
        let vault = try Vault(store: sqlite, keyFiles: KeyFiles(folder: v.folder), machineID: "ss-test-machine", kdfParameters: .minimumForTests)
        var expected: [ItemKey: String] = [:]
        for (i, mode) in AccessMode.allCases.enumerated() where mode != .whenPasscodeSetThisDeviceOnly {
            for n in 0..<5 {
                let key = ItemKey(provider: "m\(i)", account: "acct\(n)")
                expected[key] = uniqueToken("t_")
                try vault.put(key, mode: mode, secrets: Array(expected[key]!.utf8), expiresAt: Double(1_900_000_000 + n))
            }
        }
        let ss = try SecretServiceStore(vaultID: v.vaultID)
        defer { try? ss.destroy() }
        var committed = false
        let report = try vault.migrate(to: ss, vaultKey: SecretServiceVaultKey(store: ss)) { () throws(VaultError) in committed = true }
        #expect(committed)
        #expect(report.items == expected.count && report.vaultKeyMoved)
        #expect(vault.store.backendName == "secret-service")
        try sqlite.destroy()
        try VaultKeyFile(path: v.folder + "/vault.key").remove()
        for (key, text) in expected { #expect(try vault.text(key) == text) }
        // A fresh start over the Secret Service opens everything.
        let (_, fresh) = try v.openExisting(ss)
        for (key, text) in expected { #expect(try fresh.text(key) == text) }

        // And back.
        let back = try SQLiteStore(path: v.folder + "/vault2.db")
        _ = try vault.migrate(to: back, vaultKey: VaultKeyFile(path: v.folder + "/vault.key")) { () throws(VaultError) in }
        try ss.destroy()
        let reopened = try Vault(store: try SQLiteStore(path: v.folder + "/vault2.db"), keyFiles: KeyFiles(folder: v.folder), machineID: "ss-test-machine")
        for (key, text) in expected { #expect(try reopened.text(key) == text) }
    }

    @Test func migration_whoseCommitFails_leavesTheSourceInForceAndRemovesTheCopy() throws {
        _ = try PrivateKeyring.get()
        let v = try KeyringVault()
        defer { v.remove() }
        let sqlite = try SQLiteStore(path: v.folder + "/vault.db")
        let vault = try Vault(store: sqlite, keyFiles: KeyFiles(folder: v.folder), machineID: "ss-test-machine", kdfParameters: .minimumForTests)
        try vault.put(ItemKey(provider: "f", account: "a"), mode: .always, secrets: Array("x".utf8), expiresAt: nil)
        let ss = try SecretServiceStore(vaultID: v.vaultID)
        let error = vaultError {
            _ = try vault.migrate(to: ss, vaultKey: SecretServiceVaultKey(store: ss)) { () throws(VaultError) in
                throw VaultError(.failure, "simulated failure at the switch")
            }
        }
        #expect(error?.message.contains("simulated failure") == true)
        #expect(vault.store.backendName == "sqlite")
        #expect(try vault.text(ItemKey(provider: "f", account: "a")) == "x")
        try vault.put(ItemKey(provider: "f", account: "b"), mode: .always, secrets: Array("y".utf8), expiresAt: nil)
        try ss.destroy()
    }
}

extension KeyringVault {
    func openExisting(_ store: SecretServiceStore) throws -> (SecretServiceStore, Vault) {
        let keys = KeyFiles(folder: folder).keepingVaultKey(in: SecretServiceVaultKey(store: store))
        return (store, try Vault(store: store, keyFiles: keys, machineID: "ss-test-machine"))
    }
}

/// The `VaultError` that `body` throws, or nil.
func vaultError(_ body: () throws -> Void) -> VaultError? {
    do { try body() } catch let e as VaultError { return e } catch { Issue.record("expected a VaultError, got \(error)") }
    return nil
}

func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard haystack.count >= needle.count, !needle.isEmpty else { return false }
    for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] && haystack[i..<(i + needle.count)].elementsEqual(needle) { return true }
    return false
}

/// Copies a crash can leave: resolution without a service.
@Suite struct RecordResolutionTests {
    func copy(_ name: String, path: Int, updated: Double, txn: String, size: Int, deletes: String = "") -> FoundItem {
        FoundItem(path: "/c/\(path)", attributes: ["name": name, "updated": "\(updated)", "txn": txn, "txn_size": "\(size)", "txn_deletes": deletes],
                  locked: false, secret: Array("\(txn)".utf8))
    }

    @Test func resolve_changeCutShort_keepsThePreviousRecords() {
        let old = [copy("a", path: 1, updated: 1, txn: "t1", size: 2), copy("b", path: 2, updated: 1, txn: "t1", size: 2)]
        let partial = [copy("a", path: 3, updated: 2, txn: "t2", size: 2)]
        let r = SecretServiceStore.resolveRecords(old + partial)
        #expect(r["a"]?.path == "/c/1" && r["b"]?.path == "/c/2")
    }

    @Test func resolve_completeChangeBeforeTheOldCopiesWentAway_usesTheNewRecords() {
        let old = [copy("a", path: 1, updated: 1, txn: "t1", size: 2), copy("b", path: 2, updated: 1, txn: "t1", size: 2)]
        let new = [copy("a", path: 3, updated: 2, txn: "t2", size: 2), copy("b", path: 4, updated: 2, txn: "t2", size: 2)]
        let r = SecretServiceStore.resolveRecords(old + new)
        #expect(r["a"]?.path == "/c/3" && r["b"]?.path == "/c/4")
    }

    @Test func resolve_completeChangeThatDeletesARecord_dropsItsOlderCopy() {
        let old = [copy("kdf", path: 1, updated: 1, txn: "t1", size: 2), copy("a", path: 2, updated: 1, txn: "t1", size: 2)]
        let new = [copy("a", path: 3, updated: 2, txn: "t2", size: 1, deletes: "kdf")]
        let r = SecretServiceStore.resolveRecords(old + new)
        #expect(r["kdf"] == nil)
        #expect(r["a"]?.path == "/c/3")
    }
}
